"""Redis's word, pushed to this process, that a model's meta hash changed: what lets a warm
``/predict`` skip its round trip.

A serving process's copy of hot features (:mod:`online_ctr.store.replica`) is exact as of the
commit its last ``serve.lua`` call saw, and every commit, like every other change that could
move a prediction (a new epoch, a deleted model, a trimmed redo log, a calibration fit), writes
the model's meta hash. So when Redis has said nothing about that hash since a call, the copy
and what that call answered (step, fit, base rate) are still exact, and a request whose
features the copy holds needs no round trip at all. Redis says it with client-side caching's
invalidation messages (``CLIENT TRACKING ON BCAST PREFIX``, RESP3 pushes), on one connection
of this process's own, opened in a thread (it blocks) and never sent anything after its set-up.

Order: Redis writes a key's invalidation into the tracking connection's buffer when the key is
written (BCAST: before it sends the replies of that turn of its event loop), so by the time
any client has a reply that shows a commit, the notice is on its way; on one host it is
already in this process's socket. Each pass reads the socket before deciding (a ``poll``
asks whether it holds anything, and a non-blocking ``recv`` reads it if so), and the event
loop reads it in between, so pushes never pile up in Redis's output buffer. Across a network
the notice may trail a reply seen by another client by that network's delivery: a
prediction is then exact as of the last change Redis has told this process about,
microseconds old.

Anything unclear counts as a change: bytes that do not parse, a flush (a notice naming no
key), the connection lost (opened again, at most every :data:`RETRY_S`; no pass is quiet until
it is), and a new model to watch (the connection is opened again with every prefix). A Redis
user that may not send ``HELLO`` or ``CLIENT TRACKING`` (an ACL from before this; a proxy
without RESP3) leaves every pass reading Redis, as before, with one warning.

>>> token = Watched("octr:{m}:meta")
>>> token.seen([b"octr:{m}:meta", b"octr:{x}:meta"]), token.seen([b"octr:{x}:meta"])
(True, False)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hiredis
import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry

logger = logging.getLogger(__name__)

#: Seconds between attempts to open the connection again after it failed.
RETRY_S = 1.0
#: Bytes read at a time.
CHUNK = 65536

#: Opens a connection (blocking, in a thread): redis-py's, set up for RESP3.
Opener = Callable[[], redis.Redis]


@dataclass
class Watched:
    """One prefix (a model's meta key) and the changes seen to keys under it."""

    prefix: str
    changes: int = 0

    def seen(self, keys: list[bytes] | None) -> bool:
        """Count a notice of ``keys`` (None: every key) if it names one under the prefix."""
        hit = keys is None or any(key.startswith(self.prefix.encode()) for key in keys)
        self.changes += hit
        return hit


class ChangeNotices:
    """The notices of one serving process, for every model it watches."""

    def __init__(self, opener: Opener) -> None:
        self._opener = opener
        self._watched: dict[str, Watched] = {}
        #: Counts connections opened: a mark of an earlier one is never quiet.
        self._generation = 0
        self._client: redis.Redis | None = None
        self._socket: Any = None
        self._ready = select.poll()  # whether the socket has bytes to read (or hung up)
        self._tls = False
        self._reader = hiredis.Reader()
        self._opening: asyncio.Task[None] | None = None
        self._next_try = 0.0
        self._refused = False
        self._closed = False

    def mark(self, prefix: str) -> tuple[int, int] | None:
        """Where the notices of ``prefix`` stand now (read first), to compare a later mark
        with; None while no connection tracks it (an attempt to open one is started then)."""
        watched = self._watched.get(prefix)
        if watched is None:
            watched = self._watched[prefix] = Watched(prefix)
            self._drop()  # opened again with the new prefix
        self._drain()
        if self._socket is None:
            self._reopen()
            return None
        return self._generation, watched.changes

    def quiet(self, prefix: str, since: tuple[int, int] | None) -> bool:
        """Whether Redis has told of no change under ``prefix`` since the mark ``since``."""
        return since is not None and self.mark(prefix) == since

    async def close(self) -> None:
        """Close the connection, after an attempt to open one has ended: not cancelled, as
        its thread would go on and leave its connection open (it ends within the connect
        timeout, and closes what it opened, seeing this closed)."""
        self._closed = True
        if self._opening is not None:
            await asyncio.gather(self._opening, return_exceptions=True)
        self._drop()

    def _drain(self) -> None:
        """Read what Redis sent; count each notice against the prefixes it names."""
        sock = self._socket
        while sock is not None:
            # Asked first, as a recv that finds nothing raises (a pass's usual case): a poll
            # costs a third of that. A TLS socket may hold decrypted bytes the poll cannot see.
            if not (self._ready.poll(0) or (self._tls and sock.pending())):
                return
            try:
                data = sock.recv(CHUNK)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            except OSError:
                data = b""
            if not data:  # closed by Redis (a restart, CLIENT KILL, its idle timeout)
                self._drop()
                return
            if not self._parse(data):
                self._drop()  # what it means is unknown: counted as a change to every model
                return
            if len(data) < CHUNK:
                return

    def _parse(self, data: bytes) -> bool:
        self._reader.feed(data)
        while True:
            try:
                push = self._reader.gets()
            except hiredis.ProtocolError:
                return False
            if push is False:
                return True
            if not (isinstance(push, list) and len(push) == 2 and push[0] == b"invalidate"):
                return False
            for watched in self._watched.values():
                watched.seen(push[1])

    def _drop(self) -> None:
        """Forget the connection: no mark of it is quiet again."""
        client, sock = self._client, self._socket
        self._client = self._socket = None
        self._reader = hiredis.Reader()
        if sock is not None:
            with contextlib.suppress(RuntimeError):  # no loop running (closed at exit)
                asyncio.get_running_loop().remove_reader(sock)
        if client is not None:
            client.close()

    def _reopen(self) -> None:
        """Start opening a connection unless one is being opened, Redis refused tracking, or
        the last attempt failed less than :data:`RETRY_S` ago."""
        if self._opening is not None or self._refused or self._closed:
            return
        if time.monotonic() < self._next_try:
            return
        prefixes = list(self._watched)
        self._opening = asyncio.get_running_loop().create_task(self._open(prefixes))

    async def _open(self, prefixes: list[str]) -> None:
        try:
            client = await asyncio.to_thread(self._track, prefixes)
        except (ResponseError, ValueError) as error:  # NOPERM, an unknown command, no RESP3
            self._refused = True
            logger.warning(
                "Redis refused client tracking (%s): every /predict reads Redis. Grant the "
                "API's Redis user +hello and +client|tracking (`online-ctr redis-acl`), or "
                "set OCTR_PREDICT_CACHE_FEATURES=0 to keep this quiet",
                error,
            )
            return
        except (RedisError, OSError) as error:
            self._next_try = time.monotonic() + RETRY_S
            logger.info("change notices: cannot connect (%s); retrying", error)
            return
        finally:
            self._opening = None
        if self._closed or prefixes != list(self._watched):
            client.close()  # closed meanwhile, or a model added: the next pass opens anew
            return
        self._client, self._socket = client, client.connection._sock  # type: ignore[union-attr]
        self._ready = select.poll()
        self._ready.register(self._socket.fileno(), select.POLLIN)
        self._tls = isinstance(self._socket, ssl.SSLSocket)
        self._generation += 1
        asyncio.get_running_loop().add_reader(self._socket, self._drain)

    def _track(self, prefixes: list[str]) -> redis.Redis:
        """A connection tracking ``prefixes`` (blocking: run in a thread), its socket now
        non-blocking."""
        client = self._opener()
        try:
            arguments = [part for prefix in prefixes for part in ("PREFIX", prefix)]
            client.execute_command("CLIENT", "TRACKING", "ON", "BCAST", *arguments)  # type: ignore[no-untyped-call]
            sock = getattr(client.connection, "_sock", None)
            if sock is None:
                raise ValueError("the connection has no socket to read notices from")
            sock.setblocking(False)
        except BaseException:
            client.close()
            raise
        return client


def opener(url: str, timeout_s: float, options: dict[str, Any]) -> Opener:
    """How to open the notices' connection: to ``url`` with the client's TLS ``options``,
    RESP3, one connection held (``single_connection_client``), no retries."""

    def open_connection() -> redis.Redis:
        client = redis.Redis.from_url(
            url,
            protocol=3,
            single_connection_client=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            **options,
        )
        return client

    return open_connection
