"""How full Redis is (``INFO memory``): for /readyz, the memory gauges and the learner's wait
at the limit.

With a limit (``maxmemory``) and ``noeviction``, Redis refuses a write that may add memory
(an OOM error) once the memory it counts is over the limit: ``used_memory`` less
``mem_not_counted_for_evict`` (replication and AOF buffers). A Lua script is refused only at
its first such write, and only if it has written nothing yet: one that has started writing
runs to its end. So no script of the store is ever half-applied at the limit
(tests/workers/test_memory_limit.py drives every refusal path and compares DUMPs).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster

from online_ctr.store.redis_types import RedisClient


@dataclass(frozen=True)
class RedisMemory:
    """Bytes Redis holds (``used``), its limit (0: none) and what it does not count."""

    used: int
    limit: int
    not_counted: int = 0

    @property
    def full(self) -> bool:
        """Whether Redis is at its limit: writes that may add memory are refused.

        >>> RedisMemory(100, 100).full, RedisMemory(100, 0).full, RedisMemory(100, 90, 20).full
        (True, False, False)
        """
        return self.limit > 0 and self.used - self.not_counted >= self.limit

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> RedisMemory:
        """From the fields of ``INFO memory``."""
        return cls(
            int(info["used_memory"]),
            int(info["maxmemory"]),
            int(info.get("mem_not_counted_for_evict", 0)),
        )

    def share(self) -> float:
        """How much of the limit is used (0 without a limit): orders cluster nodes."""
        return (self.used - self.not_counted) / self.limit if self.limit else 0.0


async def redis_memory(redis: RedisClient) -> RedisMemory:
    """Redis's memory; on Redis Cluster, that of the primary nearest its limit (the first to
    refuse writes: its slots' models stop learning)."""
    if not isinstance(redis, RedisCluster):
        return RedisMemory.of(await redis.info("memory"))
    answers: Mapping[str, Any] = await redis.info("memory", target_nodes=RedisCluster.PRIMARIES)
    if "used_memory" in answers:  # one primary
        return RedisMemory.of(answers)
    return max((RedisMemory.of(info) for info in answers.values()), key=RedisMemory.share)


class Throttle:
    """Lets a log line through at most once per ``interval_s``: at the limit every refusal is
    counted (a metric), and said only once in a while, not once per request or retry."""

    def __init__(self, interval_s: float = 60.0) -> None:
        self.interval_s = interval_s
        self._said = -math.inf

    def due(self, now: float | None = None) -> bool:
        """Whether to say it now (and if so, the next time is ``interval_s`` away).

        >>> throttle = Throttle(60)
        >>> throttle.due(0.0), throttle.due(59.0), throttle.due(60.0)
        (True, False, True)
        """
        now = time.monotonic() if now is None else now
        if now - self._said < self.interval_s:
            return False
        self._said = now
        return True
