"""Finding the stored features of an expiring model that are gone, or of a model with a
feature budget that are evicted, for the learner's commits to delete
(:mod:`online_ctr.learning.retention`, :mod:`online_ctr.learning.eviction`).

A feature past its end is read as gone whether or not its row is still stored, so deleting
it is only a matter of memory, and any order and pace gives the same model. The learner
sweeps the buckets in turn, a slice with each commit: ``expired.lua`` reads each shard's
buckets of the slice in Redis and names the features whose last step is ``expire_after`` or
more before the commit's end. The learner's cache is newer than the shards (commits waiting
for their apply are in it, and only there), so a feature it holds is judged by its cached
row: one the shards name but the cache holds as touched since is kept.

The slice is sized so that a whole pass takes at most half the span: each commit of ``e``
examples sweeps ``2 * buckets * e / expire_after`` buckets (at least one, at most all). A
feature is then deleted at the latest about half a span after its end, once the shards have
its last commit's writes, and a model holds about the features touched in the last span and
a half. Each stored feature is read once per half span: per example, about three times the
new features an example brings, once the model holds what a span and a half brings.

A budget's evicted features are read as gone too (their last step at most a cutoff), and
swept the same way, at a pace in proportion to the evictions: each commit sweeps
``2 * buckets * e / max_features`` buckets for ``e`` features evicted since the last, so that
a whole pass takes at most half the budget's evictions. ``expired.lua`` names the rows at or
below the cutoff of zero weights with their values, and the learner judges which are evicted:
every one at or below the cutoff of all, and the zero weights above it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.eviction import CUT_ZERO, Evicting
from online_ctr.learning.retention import live
from online_ctr.store import snapshot_scan
from online_ctr.store.shards import Call
from online_ctr.store.state import ModelStore
from workers.cache import StateCache

#: Buckets one call of ``expired.lua`` reads at most (of one shard): 6 to 10 ms from the
#: client at 2M features, half of them past their end (``python -m loadtests.costs.lean_costs``;
#: 4,096 took 64 ms measured the same way, too long to keep Redis from other clients).
CALL_BUCKETS = 512


def buckets_per_commit(buckets: int, examples: int, expire_after: int) -> int:
    """How many buckets a commit of ``examples`` sweeps (see the module doc).

    >>> buckets_per_commit(1 << 18, 512, 1_000_000), buckets_per_commit(64, 1, 10**9)
    (269, 1)
    """
    wanted = math.ceil(2 * buckets * examples / expire_after)
    return max(1, min(wanted, buckets))


def shard_runs(first: int, count: int, buckets: int, shards: int) -> list[tuple[int, int, int]]:
    """Buckets ``first`` to ``first + count`` (wrapping at ``buckets``), as per shard runs of
    ``expired.lua``: (shard, first bucket, end), each of at most :data:`CALL_BUCKETS`.

    >>> shard_runs(6, 4, 8, 2)
    [(0, 6, 8), (1, 7, 8), (0, 0, 2), (1, 1, 2)]
    """
    spans = [(first, min(first + count, buckets))]
    if first + count > buckets:
        spans.append((0, first + count - buckets))
    runs = []
    for low, high in spans:
        for shard in range(shards):
            start = low + (shard - low) % shards
            for begin in range(start, high, CALL_BUCKETS * shards):
                runs.append((shard, begin, min(high, begin + CALL_BUCKETS * shards)))
    return runs


class GoneSweep:
    """The learner's sweep over an expiring model's buckets (see the module doc)."""

    def __init__(self, store: ModelStore, cache: StateCache) -> None:
        self.store = store
        self.cache = cache
        #: The next bucket to read (a new learner starts anywhere: the order changes nothing).
        self.cursor = 0
        #: A budget's evictions as of the last sweep (None: not swept since taking the lease).
        self.evicted: int | None = None

    def forget(self) -> None:
        """Start counting a budget's evictions again (a learner that lost what it knew)."""
        self.evicted = None

    async def gone(
        self, end: int, examples: int, budget: Evicting | None = None
    ) -> NDArray[np.uint64]:
        """Stored features of the next slice of buckets gone as of step ``end`` (the end of
        a commit of ``examples``), or evicted by the model's ``budget`` (as of its last
        commit); none for a model whose features never expire nor are evicted."""
        spec = self.store.spec
        span = spec.expire_after
        if span:
            count = buckets_per_commit(spec.layout.buckets, examples, span)
            ids, state = await self._read(count, end - span)
            return ids[self._judged(ids, state, lambda rows: ~live(rows[:, -1], end, span))]
        if budget is None:
            return np.zeros(0, np.uint64)
        count = self._budget_buckets(budget)
        if not count:
            return np.zeros(0, np.uint64)
        ids, state = await self._read(count, int(budget.marks[CUT_ZERO]))
        marks = budget.marks
        return ids[self._judged(ids, state, lambda rows: ~spec.held(rows, marks))]

    def _budget_buckets(self, budget: Evicting) -> int:
        """How many buckets the sweep of a budget reads now: in proportion to the features it
        evicted since the last sweep, a whole pass per half of its features evicted (so that a
        model stores its budget, the rows evicted since the last pass and those of the last
        commit). A new learner counts from its first."""
        buckets = self.store.spec.layout.buckets
        evicted, self.evicted = self.evicted, budget.evicted()
        if evicted is None:
            return 0
        wanted = math.ceil(2 * buckets * (budget.evicted() - evicted) / budget.max_features)
        return min(wanted, buckets)

    async def _read(
        self, count: int, last_gone: int
    ) -> tuple[NDArray[np.uint64], NDArray[np.float64]]:
        """The stored features of the next ``count`` buckets last touched at or before step
        ``last_gone``, and their rows."""
        layout = self.store.spec.layout
        runs = shard_runs(self.cursor, count, layout.buckets, layout.shards)
        self.cursor = (self.cursor + count) % layout.buckets
        replies = await self.store.shards.call_each(
            self.store.scripts.expired,
            [self._call(shard, first, stop, last_gone) for shard, first, stop in runs],
        )
        owners = np.frombuffer(b"".join(r[0] for r in replies), "<u4").astype(np.uint64)
        fields = b"".join(r[1] for r in replies)
        values = b"".join(r[2] for r in replies)
        return snapshot_scan.features(layout, owners, fields, values)

    def _judged(
        self,
        ids: NDArray[np.uint64],
        state: NDArray[np.float64],
        gone: Callable[[NDArray[np.float64]], NDArray[np.bool_]],
    ) -> NDArray[np.bool_]:
        """Which of the stored features ``ids`` (rows ``state`` as the shards hold them) are
        ``gone``: the cache is newer than the shards, so a feature it holds is judged by its
        row, and is kept if the cache has it as not stored."""
        rows = self.cache.find(ids)
        cached = rows >= 0
        verdict = gone(state)
        newer = self.cache.state(rows[cached])
        verdict[cached] = self.cache.stored(rows[cached]) & gone(newer)
        return verdict

    def _call(self, shard: int, first: int, stop: int, last_gone: int) -> Call:
        """The KEYS and ARGV of ``expired.lua`` over one shard's buckets ``first`` to ``stop``."""
        layout, keys = self.store.spec.layout, self.store.keys.shard(shard)
        args = [keys.bucket_prefix, first, layout.shards, stop, last_gone, layout.value_bytes]
        return [keys.applied], args
