"""How much Redis memory a model's feature state takes, measured, not computed from a count.

A model's state is its bucket hashes (:mod:`online_ctr.store.layout`) and one existence
filter per shard. Redis's ``MEMORY USAGE key SAMPLES 0`` gives a key's exact allocation
(for a listpack-encoded hash, every entry is counted); asking it of every bucket would be
2^18 calls, so it is asked of :data:`SAMPLE` buckets drawn by a fixed hash (the same on every
call, spread over every shard), with their field counts, and the bytes per feature they show
are scaled to the model's features tracked (a ratio estimate: a bucket's bytes follow its
features closely, its key and header spread over them, so the estimate is much steadier than
a mean over buckets, which most of the time would find a sparse model's buckets empty). With
no feature in the sample the buckets are taken as empty. The filters all have one size, so
one measured is all of them. The bytes per model go to ``GET /models/{name}``
(``state_bytes``) and to the gauge ``online_ctr_state_bytes``; the total Redis memory is
``online_ctr_redis_memory_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from online_ctr.learning.splitmix import mix
from online_ctr.store.failures import pipeline
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Layout
from online_ctr.store.redis_types import RedisClient

#: Buckets measured per estimate, in one pipelined round trip: 4.3 to 5.4 ms from the client
#: at 2M features (``python -m loadtests.costs.lean_costs``; 256 took 17 ms measured the same way),
#: and within 1.2% of every bucket measured in ``tests/workers/test_state_bytes.py``.
SAMPLE = 64


@dataclass(frozen=True)
class StateBytes:
    """A model's state in Redis: its buckets' bytes (estimated from ``sampled`` measured)
    and its filters' (measured)."""

    buckets: int
    filters: int
    sampled: int

    @property
    def total(self) -> int:
        return self.buckets + self.filters


def sample_buckets(layout: Layout, sample: int = SAMPLE) -> list[int]:
    """The buckets measured: ``sample`` drawn by SplitMix64 of 0, 1, ... (with repeats where
    the model has fewer buckets), the same on every call."""
    drawn = mix(np.arange(sample, dtype=np.uint64)) % np.uint64(layout.buckets)
    return [int(b) for b in drawn]


async def state_bytes(
    redis: RedisClient, keys: ModelKeys, layout: Layout, tracked: int, sample: int = SAMPLE
) -> StateBytes:
    """Estimate what ``layout``'s state under ``keys`` takes in Redis now, for a model of
    ``tracked`` features."""
    chosen = sample_buckets(layout, sample)
    async with pipeline(redis) as pipe:
        for bucket in chosen:
            key = keys.bucket(bucket, layout.shards)
            pipe.memory_usage(key, samples=0)
            pipe.hlen(key)
        pipe.memory_usage(keys.shard(0).filter, samples=0)
        *measured, filter_bytes = await pipe.execute()
    sampled = sum(int(m or 0) for m in measured[::2])  # None: a bucket not stored (empty)
    features = sum(int(n) for n in measured[1::2])
    return StateBytes(
        buckets=round(tracked * sampled / features) if features else 0,
        filters=int(filter_bytes or 0) * layout.shards,
        sampled=len(chosen),
    )
