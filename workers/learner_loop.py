"""The learner loop: hold the lease, take the next group off the stream, learn it, commit it.

One worker per model learns at a time (:mod:`online_ctr.store.lease`); the others stand by and take
over within about the lease TTL when it dies. A worker that takes the lease first replays the
redo log (:mod:`online_ctr.store.commits`), so every committed change is in the shards before it
reads any state, having checked that the log side did not go back behind the shards
(:mod:`workers.rollback`). :meth:`Worker.stop` (SIGTERM) stops intake, the group in flight still
commits, and the lease is released so a standby takes over at once. At Redis's memory limit
the learner waits and tries again (:mod:`workers.memory_wait`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from redis.exceptions import OutOfMemoryError

from online_ctr.config.join_policy import JOINS_OFF, JoinPolicy
from online_ctr.learning.admission import features_pending
from online_ctr.metrics import Metrics
from online_ctr.store.commits import Commit
from online_ctr.store.failures import redis_trouble
from online_ctr.store.lease import Lease
from online_ctr.store.promotion import write_units
from online_ctr.store.state import ModelDamagedError, ModelGoneError, ModelStore
from workers.auc import ProgressiveAuc
from workers.cache import StateCache
from workers.committer import Committer
from workers.feedback import FeedbackStream, Group
from workers.gone_sweep import GoneSweep
from workers.learn_group import Learning, NonFiniteError, learn_group
from workers.memory_wait import MemoryWait, publish_memory
from workers.model_mirror import ModelMirror
from workers.rollback import check_log, check_shards
from workers.sweeper import Sweeper
from workers.units import learned_units

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Unanswered:
    """A group whose finalize went out but whose answer never came (Redis went away): it
    committed if the model is at ``version`` under this worker's ``fence``."""

    group: Group
    learning: Learning
    fence: str
    version: tuple[int, str]


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker groups, leads and dead-letters."""

    name: str
    batch_size: int = 65_536  # most examples learned per commit
    batch_wait_ms: int = 50
    #: After reading a group short of ``batch_size`` (the stream drained), wait this long
    #: for more before reading the next (0: never).
    batch_linger_ms: int = 0
    #: How long a commit's apply waits for later commits to go with it (workers/committer.py).
    apply_linger_ms: int = 0
    lease_ttl_ms: int = 5_000
    max_deliveries: int = 5
    heartbeat_interval_s: float = 2.0
    forget_workers_after_s: float = 150.0  # silent longer: a dead worker's name, dropped
    error_backoff_s: float = 0.5
    cache_features: int = 2_000_000
    auc_window: int = 100_000  # progressive predictions the AUC gauge covers
    auc_interval_s: float = 1.0  # the AUC sorts the window: set it at most this often
    damaged_retry_s: float = 5.0  # a model whose meta refuses every commit: tried this often


class Worker:
    """Learns one model from its feedback stream, while it holds the model's lease."""

    def __init__(
        self,
        store: ModelStore,
        config: WorkerConfig,
        metrics: Metrics,
        own: bool = True,
        policy: JoinPolicy = JOINS_OFF,
        streams: list[str] | None = None,
    ) -> None:
        self.store = store
        #: The service's own model is created again if deleted; another model deleted is gone,
        #: and its learner stops.
        self.own = own
        self.config = config
        self.metrics = metrics
        self.lease = Lease(store.keys, store.scripts, config.name, config.lease_ttl_ms)
        self.stream = FeedbackStream(store)
        self.sweeper = Sweeper(store, policy, metrics, streams)
        self.cache = StateCache(store.spec.width, config.cache_features)
        self.gone_sweep = GoneSweep(store, self.cache)
        #: The model as of the last commit, loaded on taking the lease.
        self.mirror = ModelMirror()
        self.committer = Committer(store, self.cache, self.lease, config.apply_linger_ms / 1000)
        self._recovered = False
        self._single_left = 0  # entries still to learn one at a time after a failure
        self._unanswered: Unanswered | None = None
        #: Why the model's meta refuses every commit ('': it does not), logged once.
        self.damaged = ""
        self._stopping = False
        self._renewed = self._beat = 0.0
        #: When the last read found the stream drained (None: it read a full group).
        self._short_at: float | None = None
        self._linger_s = config.batch_linger_ms / 1000
        self._label = {"model": store.spec.name}
        self.auc = ProgressiveAuc(
            metrics.progressive_auc, store.spec.name, config.auc_window, config.auc_interval_s
        )
        refusals = metrics.redis_memory_refusals.labels("commit")
        self.memory = MemoryWait(store.spec.name, refusals, config.error_backoff_s)
        for series in (
            metrics.learned_examples,
            metrics.learned_weight,
            metrics.features_admitted,
            metrics.admission_dropped,
            metrics.features_expired,
            metrics.features_evicted,
            metrics.progressive_logloss,
            metrics.predicted_clicks,
            metrics.clicks,
            metrics.dead_lettered,
            metrics.commit_conflicts,
            metrics.log_rollbacks,
            metrics.shard_rollbacks,
        ):
            series.labels(**self._label)  # every series exists from the start, at 0
        for waited in ("log", "shards"):  # what a learner waits for replicas for
            metrics.replica_ack_timeouts.labels(waited)

    def _publish_fill(self) -> None:
        """The share of the admission counters in use, and the features waiting for
        admission, as of the last commit."""
        mirror = self.mirror
        assert mirror.counters is not None and mirror.tally is not None
        fill = mirror.tally.used / len(mirror.counters)
        self.metrics.admission_filter_fill.labels(**self._label).set(fill)
        pending = features_pending(mirror.tally, self.store.spec.admission, mirror.version[0])
        self.metrics.features_pending_admission.labels(**self._label).set(pending or 0)

    def stop(self) -> None:
        """Stop taking new groups; the one in flight still commits."""
        self._stopping = True

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def run(self) -> None:
        """Work until :meth:`stop`; Redis outages are waited out, not fatal."""
        while not self._stopping:
            try:
                await self._turn()
            except OutOfMemoryError as error:
                # Nothing was half-written; an apply refused may have left the committer
                # behind the redo log, which the recovery after the wait replays.
                self._reset()
                await asyncio.sleep(self.memory.refused(error))
            except ModelDamagedError as error:  # its step: as a commit refused 'damaged'
                self._damaged(str(error))
                await asyncio.sleep(self.config.damaged_retry_s)
            except ModelGoneError:
                logger.info("model %r was deleted; its learner stops", self.store.spec.name)
                self._stopping = True
            except Exception as error:
                # Whatever redis-py raised on a broken connection; a bug of ours ends the
                # learner (the fleet logs it and starts a new one).
                if not redis_trouble(error):
                    raise
                logger.warning("redis unavailable (%s: %s); retrying", type(error).__name__, error)
                self._reset()
                await asyncio.sleep(self.config.error_backoff_s)
        await self._release()

    async def _turn(self) -> None:
        """One turn of the loop: heartbeat and sweep when due, then lead and learn a group."""
        await self._heartbeat_if_due()
        await self.sweeper.sweep_if_due()
        if await self._lead():
            if not await self._step(block=True):
                await self.committer.check()  # idle: a failed apply recovers now
                await self.committer.trim_if_idle()
                self.auc.publish()  # the last commits' AUC, when due
            if self.damaged:  # not a group a second: nothing commits until mended
                await asyncio.sleep(self.config.damaged_retry_s)
        else:
            await asyncio.sleep(self.config.lease_ttl_ms / 4000)

    async def _release(self) -> None:
        """The group in flight committed, the lease given up (else it expires by itself)."""
        try:
            await self.committer.settle()
            await self.lease.release()
        except Exception as error:
            if not redis_trouble(error):
                raise
            logger.warning("could not release the lease (%s); it expires by itself", error)

    async def run_until_idle(self) -> int:
        """Learn until the stream is empty; returns the commits made (0 if not the leader)."""
        commits = 0
        await self._heartbeat_if_due()
        while True:
            await self.sweeper.sweep()  # windows due now are learned in this run too
            if not (await self._lead() and await self._step(block=False)):
                break
            commits += 1
        await self.committer.settle()
        await self.committer.trim_if_idle()
        self.auc.publish(force=True)
        return commits

    async def _lead(self) -> bool:
        """Keep (or take) the lease, renewing it every third of its TTL; recover on taking it."""
        now = time.monotonic()
        renewed_lately = now - self._renewed < self.config.lease_ttl_ms / 3000
        if self.lease.token and self._recovered and renewed_lately:
            return True
        had = self.lease.token
        if not await self.lease.hold():
            if had:
                logger.warning("worker %s lost the lease", self.config.name)
                self._reset()
            return False
        self._renewed = now
        if self.lease.token != had or not self._recovered:
            await self._recover()
        return True

    async def _recover(self) -> None:
        """Apply every commit still in the redo log, then start from the model as stored."""
        self.committer.abandon()
        self.cache.forget()
        self.auc.forget()
        # The model may have been deleted (and, if it is the own one, created again).
        await self.store.ensure(create=self.own)
        # Before the replay: a log side gone back would have it skip shards (workers/rollback.py).
        rollbacks = self.metrics.log_rollbacks.labels(**self._label)
        gen = await check_log(self.store, self.lease.token, rollbacks)
        self.committer.generation = gen
        # Replayed only once the log side's replicas hold it (replica acks, if on), and
        # trimmed only once the shards' replicas hold the applies.
        await self.store.log_replicated()
        pending = await self.store.log.pending()
        # Before the replay: a shard that lacks a commit the redo log no longer holds would
        # be hidden by it (a state failover to a lagging replica; workers/rollback.py).
        shard_rollbacks = self.metrics.shard_rollbacks.labels(**self._label)
        await check_shards(self.store, gen, pending, shard_rollbacks)
        for seq, runs, _ in pending:
            await self.store.shards.apply(seq, runs, gen)
        await self.store.shards_replicated([run for commit in pending for run in commit.runs])
        if pending:
            await self.store.log.trim(pending[-1][0])
        self.committer.applied_through = pending[-1][0] if pending else 0
        # After the redo log's applies, which set the bits of every feature they stored.
        await self.mirror.load(self.store)
        if self.mirror.counters is not None:
            self._publish_fill()
        await self._count_if_committed()
        self._recovered = True
        logger.info(
            "worker %s leads model %r at step %d",
            self.config.name,
            self.store.spec.name,
            self.mirror.version[0],
        )

    async def _count_if_committed(self) -> None:
        """The group whose answer was lost is counted (metrics, promotion units) if it
        committed: the model is one group on, and no other worker held the fence since."""
        lost, self._unanswered = self._unanswered, None
        if lost is None or lost.fence != self.lease.token or self.mirror.version != lost.version:
            return
        self._count(lost.group, lost.learning)
        await self._record_units(lost.group, lost.learning)

    def _reset(self) -> None:
        """Nothing cached is known to be exact any more: recover before the next group."""
        self.mirror.forget()
        self.gone_sweep.forget()
        self.committer.abandon()
        self.cache.forget()
        self.auc.forget()
        self._recovered = False

    async def _step(self, block: bool) -> bool:
        """Learn and commit the next group; False if the stream was empty."""
        single = self._single_left > 0
        if block and not single:
            await asyncio.sleep(linger_delay(self._short_at, time.monotonic(), self._linger_s))
        group = await self.stream.next_group(self.config.batch_size, single)
        if not group.entry_ids and not group.undecodable:
            self.committer.hurry()  # no commit follows soon: the shards get the last ones now
            if block:
                await self.stream.wait(self.config.batch_wait_ms)
            self._short_at = time.monotonic()  # what arrives next waits for company
            return False
        short = group.batch is None or len(group.batch) < self.config.batch_size
        self._short_at = time.monotonic() if short else None
        if group.head_deliveries > self.config.max_deliveries:
            await self._give_up_on_head(group, single)
            return True
        for entry_id, reason in group.undecodable.items():
            await self._dead_letter(entry_id, reason)
        if group.batch is not None:
            await self._learn(group)
        return not self.damaged

    async def _give_up_on_head(self, group: Group, single: bool) -> None:
        """The head entry keeps coming back: learn one entry at a time, or if that is what
        failed, dead-letter it."""
        head = (group.entry_ids or list(group.undecodable))[0]
        if not single:
            self._single_left = max(1, len(group.entry_ids) + len(group.undecodable))
            return
        reason = await self.stream.reason(head) or "not learned by any worker"
        await self._dead_letter(head, f"{reason} (after {self.config.max_deliveries} deliveries)")
        self._single_left -= 1

    async def _dead_letter(self, entry_id: str, reason: str) -> None:
        if await self.stream.dead_letter(self.lease.token, entry_id, reason):
            self.metrics.dead_lettered.labels(**self._label).inc()
            logger.error("dead-lettered entry %s: %s", entry_id, reason)

    async def _learn(self, group: Group) -> None:
        """Learn a group and commit it; a failure that is the data's is recorded for the
        dead-letter reason and the following entries are learned one at a time."""
        started = time.perf_counter()
        assert group.batch is not None
        await self.committer.trim_cache()
        examples = len(group.batch)
        mirror = self.mirror
        gone = await self.gone_sweep.gone(mirror.version[0] + examples, examples, mirror.budget)
        try:
            learning = await learn_group(
                self.store, self.cache, group.batch, group.entry_ids, mirror, group.served, gone
            )
        except NonFiniteError as error:
            await self._failed(group, str(error), at_once=True)
            return
        except Exception as error:  # bad data or a bug must not stop the worker: record it
            if redis_trouble(error):  # not the group's fault: no delivery counted against it
                raise
            logger.exception("group of %d entries failed", len(group.entry_ids))
            await self._failed(group, repr(error))
            return
        change = learning.change
        after = (change.t + change.examples, mirror.version[1])
        self._unanswered = Unanswered(group, learning, self.lease.token, after)
        try:
            commit = await self.committer.commit(learning, mirror.known, self._wait_for_room)
        except OutOfMemoryError:
            # Refused at the memory limit, not for its entries: reading the group again is
            # not another delivery (which could dead-letter a good entry).
            self.stream.uncount(group.head)
            raise
        self._unanswered = None
        if commit.status == "refused":
            await self._failed(group, commit.reason, at_once=True)
            return
        if commit.status == "damaged":
            await self.stream.not_delivered(group.head)
        if commit.status != "ok":
            self._refused(commit)
            return
        await self._committed(group, commit, learning, started)

    async def _committed(
        self, group: Group, commit: Commit, learning: Learning, started: float
    ) -> None:
        """What follows a group's commit: the learner's step, calibration and admission
        counters move to the model's, the metrics count it, its units are recorded."""
        self.memory.wrote()
        if self.damaged:
            logger.info("model %r commits again", self.store.spec.name)
            self.damaged = ""
        self.mirror.committed(commit.t, learning)  # committed with the group: the model's
        if self.mirror.counters is not None:
            self._publish_fill()
        self._single_left = max(0, self._single_left - len(group.entry_ids))
        self._observe(group, commit, learning, started)
        await self._record_units(group, learning)

    async def _record_units(self, group: Group, learning: Learning) -> None:
        if group.units is not None:  # the group's promoter pairs them (workers.promoter)
            assert group.batch is not None
            keys, examples = group.units
            units = learned_units(keys, examples, group.batch.weighted(learning.learned.losses))
            await write_units(self.store.redis, self.store.keys, units)

    async def _wait_for_room(self, error: OutOfMemoryError) -> None:
        """A finalize refused at Redis's memory limit (nothing of it written): wait, and the
        committer tries the same commit again; a learner told to stop gives it up instead
        (its entries stay at the head of the stream)."""
        if self._stopping:
            raise error
        await asyncio.sleep(self.memory.refused(error))

    async def _failed(self, group: Group, reason: str, at_once: bool = False) -> None:
        """A group not learned (nothing of it committed): its entries are learned one at a
        time from now on, so the others are learned once each. A failure that is its data's
        (``at_once``: the same every time) dead-letters a lone entry now, not after
        ``max_deliveries``."""
        if at_once and len(group.entry_ids) == 1:
            await self._dead_letter(group.entry_ids[0], reason)
            self._single_left = max(0, self._single_left - 1)
            return
        await self.stream.record_failures(dict.fromkeys(group.entry_ids, reason))
        self._single_left = max(self._single_left, len(group.entry_ids))

    def _refused(self, commit: Commit) -> None:
        """Fenced: another worker took the lease. Conflict: the model moved under us (it was
        deleted and created again). Damaged: a value in the model's meta is not one a commit
        can add to (said once; retried every ``damaged_retry_s``). Start over from Redis."""
        if commit.status == "damaged":
            self._damaged(commit.reason)
            return
        logger.warning("commit refused (%s); starting over", commit.status)
        self.metrics.commit_conflicts.labels(**self._label).inc()
        if commit.status == "fenced":
            self.lease.token = ""
        self._reset()

    def _damaged(self, reason: str) -> None:
        """The model's meta holds a value no commit can add to: said once, then retried."""
        if reason != self.damaged:
            logger.error(
                "model %r refuses every commit, nothing written: %s", self.store.spec.name, reason
            )
        self.damaged = reason
        self._reset()

    async def _heartbeat_if_due(self) -> None:
        now = time.monotonic()
        if now - self._beat >= self.config.heartbeat_interval_s:
            await publish_memory(self.store.redis, self.metrics)  # read first: no write
            await self.store.heartbeat(self.config.name, self.config.forget_workers_after_s)
            self.memory.wrote()
            lag = await self.stream.length()
            self.metrics.stream_lag.labels(**self._label).set(lag)
            self._beat = now

    def _observe(self, group: Group, result: Commit, learning: Learning, started: float) -> None:
        label = self._label
        self._count(group, learning)
        self.metrics.nonzero_weights.labels(**label).set(result.nonzero_weights)
        self.metrics.features_tracked.labels(**label).set(result.features_tracked)
        self.metrics.learn_batch.labels(**label).observe(time.perf_counter() - started)

    def _count(self, group: Group, learning: Learning) -> None:
        """What a committed group adds to the counters and the AUC's window."""
        label = self._label
        self.metrics.learned_examples.labels(**label).inc(group.examples)
        change = learning.change
        self.metrics.learned_weight.labels(**label).inc(change.examples + change.weight_excess)
        self.metrics.features_admitted.labels(**label).inc(learning.stored_new)
        self.metrics.features_expired.labels(**label).inc(change.expired)
        self.metrics.features_evicted.labels(**label).inc(change.budget.evicted)
        self.metrics.admission_dropped.labels(**label).inc(learning.dropped)
        self.metrics.progressive_logloss.labels(**label).inc(learning.change.logloss_sum)
        predicted, clicks, _, _ = change.sums
        self.metrics.predicted_clicks.labels(**label).inc(predicted)
        self.metrics.clicks.labels(**label).inc(clicks)
        if learning.base is not None:
            spec = self.store.spec
            self.metrics.base_rate_logit.labels(**label).set(spec.base_rate.logit(learning.base))
        # Committed groups only, in stream order: the window holds what this model learned.
        assert group.batch is not None
        self.auc.add(learning.learned.probabilities, group.batch.labels)


def linger_delay(short_at: float | None, now: float, linger_s: float) -> float:
    """How long to wait before reading the next group: what is left of ``linger_s`` since the
    last read found the stream drained at ``short_at`` (None: it read a full group, or the
    worker does not linger), so that a trickle is learned in groups, not entry by entry.

    >>> linger_delay(10.0, 10.25, 0.5), linger_delay(10.0, 11.0, 0.5), linger_delay(None, 1, 0.5)
    (0.25, 0.0, 0.0)
    """
    if short_at is None or linger_s <= 0:
        return 0.0
    return max(0.0, short_at + linger_s - now)
