"""A learner at Redis's memory limit: it waits, and learning resumes by itself.

At the limit (``maxmemory`` with ``noeviction``) Redis refuses every write that may add memory
with an OOM error, and a Lua script only at its first such write, before it has written
anything (:mod:`online_ctr.store.memory`): a refused commit, apply or heartbeat left nothing
half-done. The learner counts each refusal (``online_ctr_redis_memory_refusals{refused=
"commit"}``), says so once a minute rather than at every retry, waits a backoff that grows to
:data:`MOST_WAIT_S`, and tries the same group again; once memory is freed or the limit raised
(CONFIG SET maxmemory), the next try goes through and it says so, once.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter

from online_ctr.metrics import Metrics
from online_ctr.store.memory import Throttle, redis_memory
from online_ctr.store.redis_types import RedisClient

logger = logging.getLogger(__name__)

#: The longest wait between two tries at the limit: learning resumes within about this once
#: there is room again, and a try costs Redis one refused call.
MOST_WAIT_S = 2.0


class MemoryWait:
    """One learner's refusals at the memory limit: counted, said once in a while, waited out."""

    def __init__(self, model: str, refusals: Counter, first_wait_s: float) -> None:
        self.model = model
        self.refusals = refusals
        self.first_wait_s = first_wait_s
        #: When the first refusal of the current wait came (monotonic); None: not waiting.
        self.since: float | None = None
        self._tries = 0
        self._warn = Throttle()
        self._resume = Throttle()

    def refused(self, error: Exception) -> float:
        """Count a write refused at the limit; the seconds to wait before trying again."""
        self.refusals.inc()
        now = time.monotonic()
        if self.since is None:
            self.since, self._tries = now, 0
        if self._warn.due(now):
            logger.warning(
                "model %r: Redis is at its memory limit and refused a write (%s); learning "
                "waits and tries again, the same group, nothing lost or half-written; free "
                "memory or raise OCTR_REDIS_MAXMEMORY",
                self.model,
                error,
            )
        wait = min(self.first_wait_s * 2.0**self._tries, MOST_WAIT_S)
        self._tries += 1
        return wait

    def wrote(self) -> None:
        """A write went through: if the learner was waiting at the limit, it resumes."""
        if self.since is None:
            return
        if self._resume.due():
            waited = time.monotonic() - self.since
            logger.info(
                "model %r: Redis takes writes again; learning resumes after %.1f s at the "
                "memory limit",
                self.model,
                waited,
            )
        self.since = None


async def publish_memory(redis: RedisClient, metrics: Metrics) -> None:
    """Set the worker's gauges of Redis's memory and its limit (INFO memory)."""
    memory = await redis_memory(redis)
    metrics.redis_memory.set(memory.used)
    metrics.redis_maxmemory.set(memory.limit)
