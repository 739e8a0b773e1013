"""Finding the stored features of an expiring model that are gone, for the learner's commits
to delete (:mod:`online_ctr.learning.retention`).

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
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.retention import live
from online_ctr.store import snapshot_scan
from online_ctr.store.shards import Call
from online_ctr.store.state import ModelStore
from workers.cache import StateCache

#: Buckets one call of ``expired.lua`` reads at most (of one shard): 6 to 10 ms from the
#: client at 2M features, half of them past their end (``python -m loadtests.lean_costs``;
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


class RetentionSweep:
    """The learner's sweep over an expiring model's buckets (see the module doc)."""

    def __init__(self, store: ModelStore, cache: StateCache) -> None:
        self.store = store
        self.cache = cache
        #: The next bucket to read (a new learner starts anywhere: the order changes nothing).
        self.cursor = 0

    async def gone(self, end: int, examples: int) -> NDArray[np.uint64]:
        """Stored features of the next slice of buckets gone as of step ``end`` (the end of
        a commit of ``examples``); none for a model whose features never expire."""
        spec = self.store.spec
        span = spec.expire_after
        if not span:
            return np.zeros(0, np.uint64)
        layout = spec.layout
        count = buckets_per_commit(layout.buckets, examples, span)
        runs = shard_runs(self.cursor, count, layout.buckets, layout.shards)
        self.cursor = (self.cursor + count) % layout.buckets
        last_gone = end - span
        replies = await self.store.shards.call_each(
            self.store.scripts.expired,
            [self._call(shard, first, stop, last_gone) for shard, first, stop in runs],
        )
        owners = np.frombuffer(b"".join(r[0] for r in replies), "<u4").astype(np.uint64)
        fields = b"".join(r[1] for r in replies)
        values = bytes(len(owners) * layout.value_bytes)  # not read: the script judged them
        ids, _ = snapshot_scan.features(layout, owners, fields, values)
        # The cache is newer than the shards: a feature it holds is judged by its row.
        rows = self.cache.find(ids)
        cached = rows >= 0
        keep = np.ones(len(ids), np.bool_)
        state = self.cache.state(rows[cached])
        keep[cached] = self.cache.stored(rows[cached]) & ~live(state[:, -1], end, span)
        gone: NDArray[np.uint64] = ids[keep]
        return gone

    def _call(self, shard: int, first: int, stop: int, last_gone: int) -> Call:
        """The KEYS and ARGV of ``expired.lua`` over one shard's buckets ``first`` to ``stop``."""
        layout, keys = self.store.spec.layout, self.store.keys.shard(shard)
        args = [keys.bucket_prefix, first, layout.shards, stop, last_gone, layout.value_bytes]
        return [keys.applied], args
