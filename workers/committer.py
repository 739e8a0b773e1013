"""Committing learned groups, with the writes to the shards overlapping the learning.

A commit finalizes on the model's log side, then applies its values to the shards
(:mod:`online_ctr.store.commits`). Applies run in a task of their own while the worker fetches and
learns the next groups: Redis and the worker's Python work at the same time. Commits that
finalize while an apply is in flight wait for it and then go out together, in one apply under
the last one's number: each feature they touched once, with its latest state. Criteo's rows
share most of their features, so when Redis is the slower side a hot feature is written once
for several commits instead of once for each. That is exact because:

- a group reads from Redis only features missing from the learner's cache, and every feature
  of a commit not yet applied is in the cache until its apply has finished (the cache is
  trimmed only when no commit waits or is in flight), so no read can see a shard before a
  commit's values reach it;
- the cache holds each feature's state as of the last finalized commit, and every finalized
  commit not yet applied is waiting, so the waiting commits' features read from the cache
  when their apply starts are exactly what applying them one by one would leave;
- applies go out one at a time in commit order (each shard skips commits older than the last
  it applied, so an apply overtaking an earlier one would lose the earlier one's values);
- finalize only names as fully applied (``applied_through``) commits whose apply has finished,
  and, with replica acknowledgements on, is on the shards' replicas.

With replica acknowledgements on (``OCTR_REPLICA_ACKS``), an apply waits until the log side's
replicas hold its finalize: a failover of the log side to a replica that had not got it yet
would take the commit back, and the shards must never be ahead of the log. The wait is in the
apply's task, off the learner's path, and one wait covers every commit finalized before it.

An apply that starts after an idle spell first waits ``linger_s`` (the worker's
``apply_linger_ms``) for more commits to go with it, unless someone waits for it (:meth:`settle`),
:data:`MOST_WAITING` commits wait, or the learner finds the stream drained (:meth:`hurry`: an
idle learner's shards hold its last commit as soon as before): Redis's work per commit is one
write per feature touched, so applying the commits of 200 ms together writes a hot feature once
instead of once per commit.
The learner does not wait for that (the model's step moves at each finalize, and a serving copy
on a single Redis reads the commits not yet applied from the redo log); only the shards lag.

At most :data:`MOST_WAITING` commits wait; past that the learner waits until everything is
applied. So the shards (which ``/predict`` reads directly on Redis Cluster) lag at most twice
that many commits (a group being written and the next one waiting), and a serving copy's
catch-up stays within :data:`online_ctr.store.replica.MOST_COMMITS`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import OutOfMemoryError

from online_ctr.store.commits import Commit
from online_ctr.store.filter import ExistenceFilter
from online_ctr.store.lease import Lease
from online_ctr.store.shards import Runs
from online_ctr.store.state import ModelStore
from workers.cache import StateCache
from workers.learn_group import Learning

#: Commits that may wait for the apply in flight before the learner waits too.
MOST_WAITING = 8
#: Waits after a finalize refused at Redis's memory limit, then returns (the finalize is
#: tried again) or raises (it is given up).
AtLimit = Callable[[OutOfMemoryError], Awaitable[None]]


@dataclass(frozen=True)
class Waiting:
    """A finalized commit not applied yet: its number and records, its features with their
    cache rows, and those of them whose filter bit it sets (see :class:`Learning`)."""

    seq: int
    runs: Runs
    ids: NDArray[np.uint64]
    rows: NDArray[np.intp]
    marked: NDArray[np.uint64]


class Committer:
    """The learner's commits: the apply in flight and the commits waiting for it."""

    def __init__(
        self, store: ModelStore, cache: StateCache, lease: Lease, linger_s: float = 0.0
    ) -> None:
        self.store = store
        self.cache = cache
        self.lease = lease
        self.applied_through = 0
        #: The log generation the learner's commits are applied under (:mod:`workers.rollback`).
        self.generation = 0
        self._waiting: list[Waiting] = []
        self._applying: asyncio.Task[None] | None = None
        #: Moves at each abandon: a task of an earlier one applies nothing more.
        self._generation = 0
        #: How long an apply waits for more commits to join it (0: it goes at once).
        self.linger_s = linger_s
        #: Set when the learner waits for the applies: they linger no more.
        self._hurry = asyncio.Event()
        #: Whether an idle learner trims the redo log through its last apply at once. Not on
        #: Redis Cluster: there a shard fails over apart from the log side, and a shard that
        #: lost its last apply is repaired from the redo log only while the entry is still
        #: there (:mod:`workers.rollback`); and no serving copy reads the redo log there.
        self.trims_when_idle = not isinstance(store.redis, RedisCluster)
        #: The last commit the redo log was trimmed through by this learner's idle trims.
        self._trimmed_through = 0

    async def settle(self) -> None:
        """Wait until every finalized commit is applied; Redis errors propagate (the redo log
        keeps what was not applied)."""
        if self._applying is not None:
            self._hurry.set()
            task, self._applying = self._applying, None
            await task

    async def trim_if_idle(self) -> None:
        """The learner is idle: trim the redo log through the last commit applied, where no
        commit waits or is in flight and the apply did not trim it already. An apply trims
        when it ends after the learner found the stream drained (:meth:`hurry`); one that
        ended before (it had nothing to linger for, or lingered out) left it to this."""
        if not self.trims_when_idle or self._applying is not None or self._waiting:
            return
        if self.applied_through > self._trimmed_through:
            await self.store.log.trim(self.applied_through)
            self._trimmed_through = self.applied_through

    def hurry(self) -> None:
        """Have the waiting commits applied without lingering (the learner found nothing more
        to learn), without waiting for it."""
        if self._applying is not None:
            self._hurry.set()

    async def check(self) -> None:
        """Raise the error the apply in flight ended with, if it has ended: a learner with
        nothing more to learn would otherwise not hear of it, and leave the shards behind
        until its next commit."""
        if self._applying is not None and self._applying.done():
            await self.settle()

    async def commit(
        self,
        learning: Learning,
        known: ExistenceFilter | None = None,
        at_limit: AtLimit | None = None,
    ) -> Commit:
        """Finalize a learned group and have it applied; the cache takes its new state and
        the existence filter ``known`` (if any) the bits of its new features. A finalize
        refused at Redis's memory limit is tried again after ``at_limit`` returns."""
        await self.check()  # the error an apply ended with, if any
        if len(self._waiting) >= MOST_WAITING:
            await self.settle()
        commit = await self._finalize(learning, at_limit)
        if commit.status == "ok":
            if known is not None:
                known.add(learning.marked)
            rows = self._rows(learning)
            self.cache.update(rows, learning.state, learning.deleted)
            runs = learning.change.runs
            waiting = Waiting(commit.seq, runs, learning.ids, rows, learning.marked)
            self._waiting.append(waiting)
            if self._applying is None or self._applying.done():
                # A task that ended during the finalize passes its error, if any, to the next:
                # taken from it here, so that it is retrieved even if the next is cancelled
                # before it runs (asyncio would log it as never retrieved).
                failed = _error_of(self._applying)
                self._hurry.clear()
                applying = self._apply_waiting(failed, self._generation)
                self._applying = asyncio.create_task(applying)
        return commit

    def _rows(self, learning: Learning) -> NDArray[np.intp]:
        """The cache rows of a committed group's features; those it deleted without ever
        reading them (an expiring model's sweep) get rows now, as not stored."""
        rows = learning.rows
        uncached = rows < 0
        if not uncached.any():
            return rows
        rows, count = rows.copy(), int(uncached.sum())
        rows[uncached] = self.cache.insert(
            learning.ids[uncached], np.zeros((count, self.cache.width)), np.zeros(count, np.bool_)
        )
        return rows

    async def _finalize(self, learning: Learning, at_limit: AtLimit | None) -> Commit:
        """Finalize ``learning``, the same commit again each time Redis refuses it at its
        memory limit (refused before its first write: nothing of it is in Redis)."""
        while True:
            try:
                return await self.store.log.finalize(
                    learning.change, self.lease.token, self.applied_through
                )
            except OutOfMemoryError as error:
                # Only the finalize is tried again: an apply's error (from check or settle)
                # must reach the learner, whose recovery replays the redo log.
                if at_limit is None:
                    raise
                await at_limit(error)

    async def trim_cache(self) -> None:
        """Bound the cache's memory; only with nothing waiting or in flight (see the doc)."""
        if len(self.cache) > self.cache.max_features:
            await self.settle()
            self.cache.trim()

    def abandon(self, applied_through: int = 0) -> None:
        """Forget the applies not done (after an error or a lost lease; the redo log has them)."""
        task, self._applying = self._applying, None
        self._waiting = []
        self._generation += 1
        if task is not None:
            # A cancel is not always honoured: a task whose apply had just answered may end
            # with that answer's error, or go on (the generation stops it then).
            task.cancel()
            task.add_done_callback(_retrieve)
        self.applied_through = applied_through

    async def _apply_waiting(self, failed: BaseException | None, generation: int) -> None:
        """Apply the waiting commits, those that arrive meanwhile after them, until none wait
        (and, the learner idle, trim the redo log through the last); raise ``failed`` (the
        previous apply's error) first, if any. Abandoned (another
        ``generation``), it stops: the commits waiting then are the next learner's, and its
        cache rows no longer theirs."""
        if failed is not None:
            raise failed
        while self._waiting and generation == self._generation:
            await self._linger()
            group, self._waiting = self._waiting, []
            seq, runs = self.together(group)
            await self.store.log_replicated()
            await self.store.shards.apply(seq, runs, self.generation)
            await self.store.shards_replicated(runs)
            if generation != self._generation:
                return
            self.applied_through = seq
            if self.trims_when_idle and self._hurry.is_set() and not self._waiting:
                # The learner is idle and every shard has every commit: the redo log goes
                # now, not at the next finalize, so that the model's 'trimmed' reaches its
                # last commit and a serving copy's call reads no shard's 'applied' (serve.lua).
                # A commit finalized meanwhile is applied by the loop, as any other.
                await self.store.log.trim(seq)
                self._trimmed_through = seq

    async def _linger(self) -> None:
        """Wait ``linger_s`` for more commits to join the apply, unless the learner waits
        for it or :data:`MOST_WAITING` commits wait."""
        if self.linger_s > 0 and len(self._waiting) < MOST_WAITING and not self._hurry.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._hurry.wait(), self.linger_s)

    def together(self, group: list[Waiting]) -> tuple[int, Runs]:
        """The last commit's number and the records of every feature the ``group`` touched,
        each once with its state in the cache now (the last commit's)."""
        last = group[-1]
        if len(group) == 1:
            return last.seq, last.runs
        ids, first = np.unique(np.concatenate([w.ids for w in group]), return_index=True)
        rows = np.concatenate([w.rows for w in group])[first]
        new = np.isin(ids, np.concatenate([w.marked for w in group]))
        deleted = ~self.cache.stored(rows)  # deleted by the last commit that touched it
        layout = self.store.spec.layout
        return last.seq, layout.records(ids, self.cache.state(rows), new, deleted)


def _retrieve(task: asyncio.Task[None]) -> None:
    """Take an abandoned task's error, so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _error_of(task: asyncio.Task[None] | None) -> BaseException | None:
    """The error a finished apply task ended with (None: none, or no task)."""
    if task is None or task.cancelled():
        return None
    return task.exception()
