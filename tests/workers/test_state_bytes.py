"""A model's state bytes, estimated from a sample of its buckets, against every bucket and
filter measured with MEMORY USAGE: dense buckets, and a layout so sparse that most sampled
buckets are empty."""

from __future__ import annotations

import itertools

import pytest

from online_ctr.learning.readers import read_examples
from online_ctr.store.state_bytes import SAMPLE, sample_buckets, state_bytes
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, send

pytestmark = pytest.mark.anyio


async def measured(store: object) -> tuple[int, int]:
    """Every bucket hash's and every filter's MEMORY USAGE, summed."""
    redis, spec = store.redis, store.spec  # type: ignore[attr-defined]
    buckets = filters = 0
    async for key in redis.scan_iter(match=f"octr:{{{spec.name}/*}}:b:*", count=1000):
        buckets += int(await redis.memory_usage(key, samples=0))
    for shard in range(spec.shards):
        filters += int(await redis.memory_usage(store.keys.shard(shard).filter, samples=0))  # type: ignore[attr-defined]
    return buckets, filters


@pytest.mark.parametrize(("buckets", "shards"), [(1024, 8), (4096, 64), (1 << 20, 64)])
async def test_the_estimate_is_within_5_percent_of_every_bucket_measured(
    make_store: MakeStore, buckets: int, shards: int
) -> None:
    store = await make_store("ftrl", buckets=buckets, shards=shards)
    await send(store, itertools.islice(read_examples(CRITEO, "criteo"), 3_000), per_entry=100)
    await make_worker(store, batch_size=1_000).run_until_idle()
    every_bucket, every_filter = await measured(store)
    tracked = (await store.info()).features_tracked
    got = await state_bytes(store.redis, store.keys, store.spec.layout, tracked)
    assert got.sampled == SAMPLE and got.filters == every_filter > 0
    assert abs(got.buckets / every_bucket - 1) < 0.05, (got.buckets, every_bucket)
    # Per feature: what layout.py says a feature costs (field, value, its share of the
    # bucket's key), up to a key of its own where buckets are mostly empty (2^20 here).
    assert 20 < got.buckets / tracked < (150 if buckets > tracked else 60)


async def test_an_empty_model_has_only_its_filters(make_store: MakeStore) -> None:
    store = await make_store("ftrl", buckets=1024, shards=8)
    got = await state_bytes(store.redis, store.keys, store.spec.layout, 0)
    assert got.buckets == 0 and got.filters == (await measured(store))[1] > 0


def test_the_sample_is_fixed_and_spread_over_every_shard() -> None:
    from online_ctr.store.layout import Layout

    layout = Layout(buckets=1 << 18, shards=64, id_bits=64, width=2)
    chosen = sample_buckets(layout)
    assert chosen == sample_buckets(layout) and len(set(chosen)) == SAMPLE
    assert len({b % 64 for b in chosen}) > 32
    assert all(0 <= b < 1 << 18 for b in chosen)
