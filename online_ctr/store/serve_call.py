"""The call of ``serve.lua`` that each ``/predict`` pass makes, sent past redis-py's generic
command path.

On a warm copy (:mod:`online_ctr.store.replica`) that one EVALSHA is most of what a lone
``/predict`` asks of redis-py, and the generic path (``Script.__call__``, then
``execute_command``: a connection taken from the pool and given back under its lock, each of
the 14 arguments encoded again, the retry wrapper and the observability hooks around the call)
cost about 27 us of the call's 51 us of API CPU, measured in-process against a warm copy. So
here the arguments that never change are encoded once, the three that do (the copy's epoch
and commit, and the records it lacks) are framed on each call, and the connection sends the
bytes and reads the reply itself, with its socket timeout and its errors: a timeout or a lost
connection raises redis-py's own ``TimeoutError`` or ``ConnectionError`` (the API's 503 with
``Retry-After``), and a Redis that lost its scripts (``NOSCRIPT``: restarted, or its script
cache flushed) gets the script loaded and the same command sent again, as ``Script`` does.

The call keeps up to :data:`KEPT_CONNECTIONS` connections it borrowed from the client's pool
(so that closing the client closes them too); a call that finds none idle borrows one more
for itself, and a connection that failed goes back to the pool, which reconnects it at its
next use; a kept one that the server closed meanwhile is connected again before it is used.
A client of Redis Cluster has no such pool: there the script's own call is made (the copy is
not used on a cluster anyway).

>>> bulk(b"ab"), bulk(12), bulk("}:b:")
(b'$2\\r\\nab\\r\\n', b'$2\\r\\n12\\r\\n', b'$4\\r\\n}:b:\\r\\n')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

#: Connections a call keeps between passes: one serves passes one at a time; more are
#: borrowed from the pool, and given back, only while passes overlap.
KEPT_CONNECTIONS = 2

#: What an argument may be: encoded as redis-py encodes it.
Argument: TypeAlias = bytes | str | int


def bulk(value: Argument) -> bytes:
    """One argument as a RESP bulk string, encoded as redis-py encodes it (an int in decimal,
    a str in UTF-8)."""
    data = value if isinstance(value, bytes) else str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


class ServeCall:
    """``serve.lua`` with its key and the arguments between the copy's commit and the records
    it asks for (``middle``) and after them (``last``) fixed: ``await call(epoch, seq,
    records)`` answers what ``script(keys=[key], args=[epoch, seq, *middle, records,
    last])`` answers."""

    def __init__(
        self, script: AsyncScript, key: str, middle: Sequence[Argument], last: Argument
    ) -> None:
        self.script = script
        self.key = key
        self.middle = list(middle)
        self.last = last
        # EVALSHA, its sha, 1 and the key; the epoch and commit, the middle; records, last.
        arguments = 4 + 2 + len(self.middle) + 2
        first: list[Argument] = ["EVALSHA", script.sha, 1, key]
        self._head = b"*%d\r\n" % arguments + b"".join(map(bulk, first))
        self._middle = b"".join(map(bulk, self.middle))
        self._tail = b"\r\n" + bulk(last)
        client = script.registered_client
        self._pool = client.connection_pool if isinstance(client, aioredis.Redis) else None
        self._kept: list[AbstractConnection] = []

    def command(self, epoch: bytes, seq: int, records: bytes) -> list[bytes]:
        """The command's bytes, the records (up to megabytes) not copied into another buffer."""
        framed = self._head + bulk(epoch) + bulk(seq) + self._middle + b"$%d\r\n" % len(records)
        return [framed, records, self._tail]

    async def __call__(self, epoch: bytes, seq: int, records: bytes) -> Any:
        if self._pool is None:
            args = [epoch, seq, *self.middle, records, self.last]
            return await self.script(keys=[self.key], args=args)
        command = self.command(epoch, seq, records)
        try:
            return await self._send(command)
        except NoScriptError:
            # As redis-py's Script does: load it (the sha is the source's, so the same) and
            # send the command again.
            await self.script.registered_client.script_load(self.script.script)
            return await self._send(command)

    async def _send(self, command: list[bytes]) -> Any:
        assert self._pool is not None
        pool = self._pool
        connection = self._kept.pop() if self._kept else await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await self._ready(connection)
            # The API's connections name the command in a refusal by its ACL rules
            # (online_ctr.wiring's send_named); any other sends it as it is.
            named = getattr(connection, "send_named", None)
            if named is not None:
                await named("EVALSHA", command)
            else:
                await connection.send_packed_command(command, check_health=False)
            reply = await connection.read_response()
        except BaseException:
            # Its reply, if any, unread (read_response disconnected it then): the pool
            # reconnects it at its next use.
            await pool.release(connection)
            raise
        if len(self._kept) < KEPT_CONNECTIONS:
            self._kept.append(connection)
        else:
            await pool.release(connection)
        return reply

    async def _ready(self, connection: AbstractConnection) -> None:
        """Connected, with nothing waiting to be read. One the server closed meanwhile (a
        restart, its own idle timeout) reads as its end: it connects again rather than fail
        the pass, which redis-py's pool leaves to the command when maintenance notifications
        may arrive (its default); none come on these connections, and a reply left unread
        would be another command's anyway."""
        try:
            if connection.is_connected and not await connection.can_read():
                return
        except RedisConnectionError:  # can_read disconnected it
            pass
        await connection.disconnect()
        await connection.connect()  # type: ignore[no-untyped-call]
