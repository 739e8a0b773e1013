"""The stream consumer loop: claim stuck entries, read new ones, apply them, repeat.

Each worker is a consumer in the model's group. Entries another consumer left pending for
longer than the reclaim idle time are taken over with XAUTOCLAIM (the other worker crashed or
stalled; if it was merely slow, its own commit is now fenced off). An entry delivered more
than ``max_deliveries`` times goes to the dead-letter stream with the last failure reason.
:meth:`Worker.stop` (SIGTERM) stops intake; the batch in flight is finished first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from octr.metrics import Metrics
from octr.store.state import Commit, ModelStore
from workers.batch import Decoded, apply, decode
from workers.cache import StateCache
from workers.stream import FeedbackStream, Fetched, Message

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker batches, reclaims and dead-letters."""

    consumer: str
    batch_size: int = 512
    batch_wait_ms: int = 50
    reclaim_idle_ms: int = 30_000
    max_deliveries: int = 5
    heartbeat_interval_s: float = 2.0
    error_backoff_s: float = 0.5
    cache_features: int = 1_000_000
    #: Mini-batches learned (in order, exactly) before one commit applies them all.
    commit_batches: int = 8

    @property
    def entries_per_commit(self) -> int:
        return self.batch_size * self.commit_batches


class Worker:
    """Learns one model from its feedback stream."""

    def __init__(self, store: ModelStore, config: WorkerConfig, metrics: Metrics) -> None:
        self.store = store
        self.config = config
        self.metrics = metrics
        self._stopping = False
        self._last_heartbeat = 0.0
        self._last_reclaim = 0.0
        self._label = {"model": store.spec.name}
        # Every series exists from the start (at 0), so dashboards and alerts see it.
        for counter in (
            metrics.learned_examples,
            metrics.progressive_logloss,
            metrics.dead_lettered,
            metrics.commit_conflicts,
        ):
            counter.labels(**self._label)
        self.cache = StateCache(store.spec.width, store.spec.buckets, config.cache_features)
        self.stream = FeedbackStream(store, config.consumer)

    @property
    def redis(self) -> aioredis.Redis:
        return self.store.redis

    def stop(self) -> None:
        """Stop taking new entries; the batch in flight still commits."""
        self._stopping = True

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def run(self) -> None:
        """Work until :meth:`stop`; Redis outages are waited out, not fatal."""
        while not self._stopping:
            try:
                await self._work(block=True)
            except (RedisError, OSError) as error:
                logger.warning("redis unavailable (%s); retrying", error)
                await asyncio.sleep(self.config.error_backoff_s)

    async def run_until_idle(self) -> int:
        """Process until nothing is left to read or reclaim; returns the commits made."""
        return await self._work(block=False)

    async def _work(self, block: bool) -> int:
        """Apply batches while the next one is fetched and decoded, so that the worker's
        Python overlaps Redis's work; returns when stopped (after draining what was already
        fetched) or, unless ``block``, when nothing is left."""
        applied = 0
        fetching = asyncio.ensure_future(self._fetch(block))
        try:
            while True:
                decoded = await fetching
                if decoded is None and (self._stopping or not block):
                    return applied
                fetching = asyncio.ensure_future(self._fetch(block))
                if decoded is not None:
                    await self._process(decoded)
                    applied += 1
        finally:
            await _settle(fetching)

    async def _fetch(self, block: bool) -> Decoded | None:
        """The next batch, decoded: stuck entries when a reclaim is due, else new ones."""
        if self._stopping:
            return None
        await self._heartbeat_if_due()
        config = self.config
        fetched = await self._reclaim_if_due()
        if not fetched.messages:
            fetched = await self.stream.read_new(
                config.entries_per_commit, config.batch_wait_ms, block
            )
        if not fetched.messages:
            # Idle: anything pending now can only be someone else's stuck entries.
            fetched = await self._reclaim()
        if not fetched.messages:
            return None
        decoded = decode(fetched.messages, fetched.claims, config.batch_size)
        if decoded.failures:
            await self.stream.record_failures(decoded.failures)
        return decoded

    async def _reclaim_if_due(self) -> Fetched:
        """Reclaim at most a few times per idle period: it costs a round trip per batch."""
        now = time.monotonic()
        if now - self._last_reclaim < self.config.reclaim_idle_ms / 4000:
            return Fetched([], "")
        return await self._reclaim()

    async def _heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat >= self.config.heartbeat_interval_s:
            await self.store.heartbeat(self.config.consumer)
            lag = await self.redis.xlen(self.store.keys.stream)
            self.metrics.stream_lag.labels(**self._label).set(lag)
            self._last_heartbeat = now

    async def _reclaim(self) -> Fetched:
        """Entries idle too long in other consumers' hands, minus those dead-lettered now."""
        self._last_reclaim = time.monotonic()
        fetched = await self.stream.reclaim(
            self.config.reclaim_idle_ms, self.config.entries_per_commit
        )
        if not fetched.messages:
            return fetched
        deliveries = await self.stream.deliveries([m[0] for m in fetched.messages])
        keep: list[Message] = []
        for message in fetched.messages:
            if deliveries.get(message[0], 0) > self.config.max_deliveries:
                text = await self.stream.dead_letter(message, self.config.max_deliveries)
                self.metrics.dead_lettered.labels(**self._label).inc()
                logger.error("dead-lettered entry %s: %s", message[0].decode(), text)
            else:
                keep.append(message)
        return Fetched(keep, fetched.claims)

    async def _process(self, decoded: Decoded) -> None:
        """Learn and commit; record failures so dead-lettering can say why."""
        started = time.perf_counter()
        if not decoded.batches:
            return
        try:
            result, scored = await apply(
                self.store, self.cache, self.config.consumer, decoded, self._count_conflict
            )
        except (RedisError, OSError):
            raise  # not the batch's fault: it stays pending and is retried
        except Exception as error:  # bad data or a bug must not stop the worker: record it
            logger.exception("batch of %d entries failed", len(decoded.entry_ids))
            await self.stream.record_failures(dict.fromkeys(decoded.entry_ids, repr(error)))
            return
        if result.status == "ok":
            loss = sum(float(done.losses.sum()) for done in scored)
            self._observe(decoded.examples, result, loss, started)
        else:
            # fenced: another worker reclaimed the entries and owns them now; conflict: the
            # step kept moving for every attempt, so the entries stay pending for a retry.
            logger.warning("batch of %d entries not committed: %s", len(decoded.entry_ids), result)

    def _count_conflict(self) -> None:
        self.metrics.commit_conflicts.labels(**self._label).inc()

    def _observe(self, examples: int, result: Commit, loss: float, started: float) -> None:
        label = self._label
        self.metrics.learned_examples.labels(**label).inc(examples)
        self.metrics.progressive_logloss.labels(**label).inc(loss)
        self.metrics.nonzero_weights.labels(**label).set(result.nonzero_weights)
        self.metrics.features_tracked.labels(**label).set(result.features_tracked)
        self.metrics.learn_batch.labels(**label).observe(time.perf_counter() - started)


async def _settle(task: asyncio.Future[Any]) -> None:
    """Cancel a fetch we no longer wait for. Entries it may already have read stay pending
    for this consumer and are reclaimed later; nothing is lost."""
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
        await task
