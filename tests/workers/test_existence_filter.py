"""The existence filter: made with the model, the apply script sets exactly the bits the learner
computes, the learner asks Redis only for features whose bit is set, and a shard without its
filter is read as before."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.store.filter import ExistenceFilter
from online_ctr.store.layout import Layout
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, scan_state, send

pytestmark = pytest.mark.anyio


async def loaded(store: ModelStore) -> ExistenceFilter:
    return await ExistenceFilter.load(store.redis, store.keys, store.spec.layout)


async def hget_calls(store: ModelStore) -> int:
    stats = await store.redis.info("commandstats")
    return int(stats.get("cmdstat_hget", {}).get("calls", 0))


def expected_bitmaps(
    layout: Layout, ids: np.ndarray, filter_bytes: int | None = None
) -> np.ndarray:
    """Each shard's filter bytes with the bits of ``ids`` set, in Redis's bit order; in
    filters of ``filter_bytes`` (by default a new one's)."""
    size = layout.filter_bytes if filter_bytes is None else filter_bytes
    bits = np.zeros((layout.shards, size * 8), np.uint8)
    at = layout.filter_of(ids, size)
    bits[at[:, 0], at[:, 1]] = 1
    return np.packbits(bits, axis=1)  # most significant bit first, as SETBIT numbers them


@pytest.mark.parametrize(("buckets", "shards"), [(16, 4), (4096, 64), (1, 1)])
async def test_apply_sets_the_bits_of_new_features_only(
    make_store: MakeStore, buckets: int, shards: int
) -> None:
    store = await make_store("ftrl", buckets=buckets, shards=shards)
    layout = store.spec.layout
    rng = np.random.default_rng(3)
    ids = np.unique(rng.integers(0, 2**64 - 1, 3_000, dtype=np.uint64, endpoint=True))
    new = rng.random(len(ids)) < 0.5
    await store.shards.apply(1, layout.records(ids, rng.normal(size=(len(ids), 2)), new))
    for shard in range(shards):
        stored = await store.redis.get(store.keys.shard(shard).filter)
        assert stored is not None and len(stored) == layout.filter_bytes  # made at full length
        expected = expected_bitmaps(layout, ids[new])[shard].tobytes()
        assert stored == expected
    before = (await loaded(store)).maybe(ids)
    assert before[new].all()
    # Commit 1 again (a redo replay) changes nothing; records of an import set every bit.
    await store.shards.apply(1, layout.records(ids, np.zeros((len(ids), 2))))
    np.testing.assert_array_equal((await loaded(store)).maybe(ids), before)
    await store.shards.apply(2, layout.records(ids, np.zeros((len(ids), 2))))
    assert (await loaded(store)).maybe(ids).all()


async def test_a_learner_reads_no_new_feature_and_a_successor_trusts_the_filter(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=1 << 12, shards=16)
    layout = store.spec.layout
    rows = list(itertools.islice(read_examples(CRITEO, "criteo"), 600))
    await send(store, rows[:300], per_entry=50)
    await store.redis.config_resetstat()
    first = make_worker(store, "first", batch_size=300)
    await first.run_until_idle()
    # A fresh model: every bit clear, so the first group read nothing from the buckets (the
    # few HGETs are of the model's meta hash).
    assert await hget_calls(store) < 10
    first_ids = np.array(list(await scan_state(store)), np.uint64)
    await send(store, rows[300:], per_entry=50)
    await first.lease.release()
    await store.redis.config_resetstat()
    second = make_worker(store, "second", batch_size=300)
    await second.run_until_idle()
    assert second.mirror.known is not None
    # The second learner, which loaded the filter, read exactly the features of its group
    # whose bit the first group set: those it shares with it, and some more (another's bit).
    hasher = FeatureHasher(store.spec.hash_bits, numeric=store.spec.numeric)
    second_ids = np.unique(hasher.batch([x for x, _ in rows[300:]], [0.0] * 300).ids)
    at = layout.filter_of(second_ids)
    bitmaps = np.unpackbits(expected_bitmaps(layout, first_ids), axis=1)
    expected = int(bitmaps[at[:, 0], at[:, 1]].sum())
    shared = int(np.isin(second_ids, first_ids).sum())
    assert 0 < shared < expected < len(second_ids) / 2
    assert expected <= await hget_calls(store) <= expected + 10  # and the meta's few


async def test_a_shard_without_its_filter_is_read_as_before_and_stays_without(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=256, shards=4)
    layout = store.spec.layout
    # A model stored by an older version has no filters; here one of four shards lost its
    # own (deleted with its model while a learner made the model again).
    await store.redis.unlink(store.keys.shard(1).filter)
    await send(store, itertools.islice(read_examples(CRITEO, "criteo"), 200))
    await store.redis.config_resetstat()
    worker = make_worker(store, batch_size=200)
    await worker.run_until_idle()
    assert worker.mirror.known is not None and worker.mirror.known.trusted.tolist() == [
        True,
        False,
        True,
        True,
    ]
    stored = np.array(list(await scan_state(store)), np.uint64)
    in_shard_1 = int((layout.shard_of(stored) == 1).sum())
    # Every feature of shard 1 was read (and the meta's few HGETs); the others' filters were
    # empty, so none of theirs was.
    assert in_shard_1 <= await hget_calls(store) <= in_shard_1 + 10
    assert await store.redis.exists(store.keys.shard(1).filter) == 0  # apply made none
    assert (await loaded(store)).maybe(stored).all()


async def test_a_model_made_with_filters_of_16_bytes_a_bucket_keeps_them_and_their_bits(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=4096, shards=16)
    layout = store.spec.layout
    # Filters as a model made before they grew to 24 bytes per bucket has them: 16 per bucket.
    old = 16 * (layout.buckets // layout.shards) - 16
    for shard in range(layout.shards):
        await store.redis.unlink(store.keys.shard(shard).filter)
        await store.redis.setrange(store.keys.shard(shard).filter, old - 1, b"\0")
    rows = list(itertools.islice(read_examples(CRITEO, "criteo"), 600))
    await send(store, rows[:300], per_entry=50)
    first = make_worker(store, "first", batch_size=300)
    await first.run_until_idle()
    assert first.mirror.known is not None and first.mirror.known.filter_bytes == old
    await send(store, rows[300:], per_entry=50)
    await first.lease.release()
    second = make_worker(store, "second", batch_size=300)
    await second.run_until_idle()
    stored = await scan_state(store)
    ids = np.array(list(stored), np.uint64)
    # The bits went where a filter of that length puts them (not where a new one would), and
    # the successor, which loaded them, found every stored feature's.
    assert (layout.filter_of(ids, old) != layout.filter_of(ids)).any()
    for shard, bitmap in enumerate(expected_bitmaps(layout, ids, old)):
        assert await store.redis.get(store.keys.shard(shard).filter) == bitmap.tobytes()
    assert second.mirror.known is not None and second.mirror.known.trusted.all()
    assert second.mirror.known.maybe(ids).all()
    model = InMemoryModel(store.spec.rule, store.spec.params)
    replay(rows, model, FeatureHasher(), batch_size=1)
    expected = model.snapshot()
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])


def test_a_filter_of_another_length_than_most_is_not_trusted() -> None:
    layout = Layout(buckets=1 << 6, shards=4, id_bits=64, width=2)
    new, old = bytes(layout.filter_bytes), bytes(16 * 16 - 16)
    known = ExistenceFilter(layout, [old, old, new, None])
    assert known.filter_bytes == len(old) and known.trusted.tolist() == [True, True, False, False]
    assert ExistenceFilter(layout, [None] * 4).filter_bytes == layout.filter_bytes
