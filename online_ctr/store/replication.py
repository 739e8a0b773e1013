"""Replicated acknowledgements: a write counts once the master's replicas hold it.

Redis replicates asynchronously. A master that dies before its replica has a write takes the
write with it, and the promoted replica goes on without it: accepted feedback lost, commits
applied to shards that the log side no longer has (issue 37). ``WAIT n timeout`` blocks its
connection until ``n`` replicas have every write *that connection* made. So
:meth:`ReplicaAcks.confirm` sends, on one connection to the master of a key's slot, a small
write in the key's hash tag (the barrier: it comes after every write the master has done, by
any connection, so a WAIT that covers it covers them all), then WAIT, then ROLE (the replicas
the master has now, for the next call).

How many replicas: ``OCTR_REPLICA_ACKS``, but never more than the master has attached, as
Kafka's ``acks=all`` waits for the in-sync replicas. A master whose replica is gone takes
writes alone (there is nothing it could fail over to), and says so in the log; a replica that
is attached but behind (stalled, slow link) makes WAIT time out, and the write is
not counted as replicated: :class:`ReplicaAckError`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from online_ctr.config.settings import Settings
from online_ctr.store.failures import pipeline
from online_ctr.store.keys import ack_barrier
from online_ctr.store.redis_types import RedisClient

logger = logging.getLogger(__name__)

#: The barrier: one small key per hash tag that expires by itself. ``allow-oom``: at Redis's
#: memory limit the write it confirms was let through, and confirming it must be too.
BARRIER = "#!lua flags=allow-oom\nredis.call('SET', KEYS[1], '1', 'PX', ARGV[1])\nreturn 1\n"
BARRIER_TTL_MS = 60_000


class Child(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class Counts(Protocol):
    """A counter labelled by what waited, as prometheus-client's."""

    def labels(self, *values: str) -> Child: ...


class ReplicaAckError(RedisError):
    """Fewer replicas than asked acknowledged a write within the timeout: the write is on
    the master, but a failover now could lose it."""


@dataclass
class ReplicaAcks:
    """Confirms writes on the masters of given keys (``replicas`` 0: confirms nothing)."""

    redis: RedisClient
    replicas: int = 0
    timeout_ms: int = 500
    #: Counts the waits that ended short of the replicas asked for.
    timeouts: Counts | None = None
    #: Per master (its address), how many replicas it had at its last confirm.
    _attached: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def of(
        cls, redis: RedisClient, settings: Settings, timeouts: Counts | None = None
    ) -> ReplicaAcks:
        """As ``OCTR_REPLICA_ACKS`` and ``OCTR_REPLICA_ACKS_TIMEOUT_MS`` say."""
        ms = settings.replica_ack_timeout_ms()
        return cls(redis, settings.replicas_to_ack(), ms, timeouts)

    @property
    def on(self) -> bool:
        return self.replicas > 0

    async def confirm(self, *keys: str, waited: str = "learn") -> None:
        """Return once the masters of ``keys`` have their writes so far on the replicas
        asked for (see the module doc); else count it under ``waited`` and raise
        :class:`ReplicaAckError`."""
        if not self.on:
            return
        try:
            for node, key in self._by_master(keys).items():
                await self._confirm_on(node, key)
        except ReplicaAckError:
            if self.timeouts is not None:
                self.timeouts.labels(waited).inc()
            raise

    def _by_master(self, keys: tuple[str, ...]) -> dict[Any, str]:
        """One key per master: a barrier there covers every write of that master."""
        if not isinstance(self.redis, RedisCluster):
            return {None: keys[0]} if keys else {}
        masters: dict[Any, str] = {}
        for key in keys:
            masters.setdefault(self.redis.get_node_from_key(key), key)
        return masters

    async def _confirm_on(self, node: Any, key: str) -> None:
        name = "redis" if node is None else node.name
        asked = min(self.replicas, self._attached.get(name, self.replicas))
        route = {} if node is None else {"target_nodes": node}
        async with pipeline(self.redis) as pipe:
            barrier = ack_barrier(key)
            pipe.execute_command("EVAL", BARRIER, 1, barrier, BARRIER_TTL_MS, **route)
            pipe.execute_command("WAIT", asked, self.timeout_ms, **route)
            pipe.execute_command("ROLE", **route)
            # No redirection: a barrier sent on to another node would leave WAIT's answer
            # about this one. A moved slot is a failure; the caller tries again.
            options = {} if node is None else {"allow_redirections": False}
            _, acked, role = await pipe.execute(**options)
        if role[0] not in (b"master", "master"):  # demoted between the writes and now
            raise ReplicaAckError(f"{name} is no longer a master: its writes may be gone")
        attached = len(role[2])
        self._note(name, attached)
        # A replica gone meanwhile is not waited for; one attached but behind is.
        if int(acked) < min(asked, attached):
            raise ReplicaAckError(
                f"{acked} of {asked} replicas of {name} acknowledged within "
                f"{self.timeout_ms} ms (OCTR_REPLICA_ACKS_TIMEOUT_MS): the write is on the "
                "master only"
            )

    def _note(self, name: str, attached: int) -> None:
        before = self._attached.get(name, self.replicas)
        self._attached[name] = attached
        if attached < self.replicas <= before:
            logger.warning(
                "Redis %s has %d of the %d replicas OCTR_REPLICA_ACKS asks for: its writes are "
                "acknowledged with %d until they are back",
                name,
                attached,
                self.replicas,
                attached,
            )
        elif before < self.replicas <= attached:
            logger.info("Redis %s has its replicas again; writes wait for %d", name, self.replicas)
