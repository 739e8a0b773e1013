"""The bound on Idempotency-Key records holds on a real Redis Cluster: append.lua drops the
oldest records by names it builds from their prefix, keys of the same hash tag (one slot), and
a model's delete deletes them with their index (``forget``)."""

from __future__ import annotations

import pytest
from redis.asyncio.cluster import RedisCluster

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.rules import get_rule
from online_ctr.store import idempotency
from online_ctr.store.idempotency import KeyLimits
from online_ctr.store.ingest import FeedbackLog
from online_ctr.store.state import ModelStore, spec_from

pytestmark = pytest.mark.anyio


async def test_the_oldest_records_are_dropped_and_forgotten_with_the_model(
    cluster: RedisCluster,
) -> None:
    spec = spec_from("c", "ftrl", get_rule("ftrl").params(), None, 64, 8, "float64")
    store = ModelStore(cluster, spec)
    await store.ensure()
    keys = store.keys
    log = FeedbackLog(cluster, keys.feedback, [keys], KeyLimits(600, 5))
    batch = FeatureHasher().batch([{"site": "news"}], [1])
    dropped = [(await log.append(batch, f"k-{i:02d}")).evicted for i in range(20)]
    assert dropped == [0] * 5 + [1] * 15
    prefix = keys.feedback.idempotency("")
    held = {key async for key in cluster.scan_iter(match=prefix + "*")}
    assert held == {f"{prefix}k-{i:02d}".encode() for i in range(15, 20)}
    assert (await log.append(batch, "k-19")).replayed
    assert await idempotency.forget(cluster, keys.feedback) == 5
    assert not [key async for key in cluster.scan_iter(match=prefix + "*")]
    assert not await cluster.exists(keys.feedback.idempotency_index)


async def test_a_deleted_model_leaves_no_key_on_the_cluster(cluster: RedisCluster) -> None:
    """Every key of the model goes, the state shards' on every node included: the cluster
    pipeline's ``unlink`` is a coroutine that queued nothing (its keys stayed for good)."""
    spec = spec_from("gone", "ftrl", get_rule("ftrl").params(), None, 64, 8, "float64")
    store = ModelStore(cluster, spec)
    await store.ensure()
    batch = FeatureHasher().batch([{"site": "news"}], [1])
    await FeedbackLog(cluster, store.keys.feedback, [store.keys], KeyLimits(600, 5)).append(
        batch, "k"
    )
    before = [key async for key in cluster.scan_iter(match="octr:{gone*")]
    assert len(before) > 8  # the log side and every shard's filter
    await store.delete()
    assert not [key async for key in cluster.scan_iter(match="octr:{gone*")]
