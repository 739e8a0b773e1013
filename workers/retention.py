"""Finding the stored features of an expiring model that are gone, for the learner's commits
to delete (:mod:`online_ctr.learning.retention`).

A feature past its end is read as gone whether or not its row is still stored, so deleting
it is only a matter of memory, and any order and pace gives the same model. The learner
sweeps the buckets in turn, a slice with each commit: it reads their rows (``HGETALL``, one
pipelined round trip) and names those whose last step is ``expire_after`` or more before the
commit's end. The learner's cache is newer than the shards (commits waiting for their apply
are in it, and only there), so a feature it holds is judged by its cached row.

The slice is sized so that a whole pass takes at most half the span: each commit of ``e``
examples sweeps ``2 * buckets * e / expire_after`` buckets, at least one and at most
:data:`MOST_BUCKETS`. A feature is then deleted at the latest about half a span after its
end, and a model holds at most the features touched in the last one and a half spans (when
no commit is capped). Reading a bucket costs about what writing its features does, and a
pass reads each stored feature once per half span.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.retention import live
from online_ctr.store import snapshot_scan
from online_ctr.store.failures import pipeline
from online_ctr.store.state import ModelStore
from workers.cache import StateCache

#: Buckets read with one commit at most: about 2 MB of reply at 100 features a bucket.
MOST_BUCKETS = 512


def buckets_per_commit(buckets: int, examples: int, expire_after: int) -> int:
    """How many buckets a commit of ``examples`` sweeps (see the module doc).

    >>> buckets_per_commit(1 << 18, 512, 1_000_000), buckets_per_commit(64, 1, 10**9)
    (269, 1)
    """
    wanted = math.ceil(2 * buckets * examples / expire_after)
    return max(1, min(wanted, MOST_BUCKETS, buckets))


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
        if not spec.expire_after:
            return np.zeros(0, np.uint64)
        layout, keys = spec.layout, self.store.keys
        count = buckets_per_commit(layout.buckets, examples, spec.expire_after)
        chosen = [(self.cursor + i) % layout.buckets for i in range(count)]
        self.cursor = (self.cursor + count) % layout.buckets
        async with pipeline(self.store.redis) as pipe:
            for bucket in chosen:
                pipe.hgetall(keys.bucket(bucket, layout.shards))
            read = await pipe.execute()
        owners = [b for b, page in zip(chosen, read, strict=True) for _ in range(len(page))]
        fields = b"".join(f for page in read for f in page)
        values = b"".join(v for page in read for v in page.values())
        ids, state = snapshot_scan.features(layout, np.array(owners, np.uint64), fields, values)
        stored = np.ones(len(ids), np.bool_)
        tau = state[:, -1].copy()
        rows = self.cache.find(ids)
        cached = rows >= 0
        tau[cached] = self.cache.state(rows[cached])[:, -1]
        stored[cached] = self.cache.stored(rows[cached])
        gone: NDArray[np.uint64] = ids[stored & ~live(tau, end, spec.expire_after)]
        return gone
