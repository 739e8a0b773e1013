"""Serving's per-feature reads find exactly the rows stored in the bucket hashes."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.readers import read_examples
from online_ctr.store.state import ModelMismatchError, ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, scan_state, send

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("buckets", "shards"), [(1, 1), (16, 4), (4096, 64), (1 << 20, 8)])
async def test_lookup_equals_the_stored_rows(
    make_store: MakeStore, buckets: int, shards: int
) -> None:
    # fobos: weights depend on t and on every field
    store = await make_store("fobos", buckets=buckets, shards=shards)
    await send(store, itertools.islice(read_examples(CRITEO, "criteo"), 1_500))
    await make_worker(store, batch_size=50).run_until_idle()
    stored = await scan_state(store)
    rng = np.random.default_rng(7)
    # Every stored id, ids that are not stored (across the whole 64-bit range), the extremes.
    unknown = rng.integers(0, 2**64 - 1, size=500, dtype=np.uint64, endpoint=True)
    extremes = np.array([0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1], dtype=np.uint64)
    ids = np.concatenate([np.array(list(stored), dtype=np.uint64), unknown, extremes])
    rng.shuffle(ids)
    rows = np.array([stored.get(int(i), np.zeros(store.spec.width)) for i in ids])
    t = (await store.info()).t
    expected = store.spec.rule.weights(rows, t, store.spec.params)
    np.testing.assert_array_equal(await store.weights(ids), expected)
    assert np.count_nonzero(expected) > 100


async def test_one_bucket_takes_a_commit_of_thousands_of_features(make_store: MakeStore) -> None:
    # Every feature in one bucket: the scripts must chunk what they pass to one command.
    store = await make_store("ftrl", buckets=1, shards=1)
    await send(store, itertools.islice(read_examples(CRITEO, "criteo"), 2_000), per_entry=100)
    await make_worker(store, batch_size=2_000).run_until_idle()
    stored = await scan_state(store)
    assert len(stored) > 5_000
    ids = np.array(list(stored), dtype=np.uint64)
    t = (await store.info()).t
    expected = store.spec.rule.weights(np.array(list(stored.values())), t, store.spec.params)
    np.testing.assert_array_equal(await store.weights(ids), expected)


def random_state(store: ModelStore, count: int, seed: int) -> tuple[Any, Any]:
    """Up to ``count`` distinct random feature ids over the whole 64-bit range, and a random
    state row for each."""
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(0, 2**64 - 1, size=count, dtype=np.uint64, endpoint=True))
    return ids, rng.normal(size=(len(ids), store.spec.width))


async def test_a_large_commit_goes_out_in_several_calls_and_every_shard_applies_it_once(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=1 << 12, shards=16)
    ids, state = random_state(store, 30_000, seed=3)
    runs = store.spec.layout.records(ids, state)
    calls = store.shards._calls(runs)
    assert len(calls) > 2, "the commit should need several calls"
    assert sorted(shard for call in calls for shard, _ in call) == list(range(16))
    await store.shards.apply(1, runs)
    # A replay of the same commit, and a late older one, change nothing.
    await store.shards.apply(1, store.spec.layout.records(ids, state + 1))
    read = await store.shards.read(ids)
    np.testing.assert_array_equal(read.state, state)
    assert read.stored.all()


async def script_calls(store: ModelStore) -> dict[str, int]:
    """Calls per script command so far (INFO commandstats), by command name."""
    stats = await store.redis.info("commandstats")
    return {name: int(entry["calls"]) for name, entry in stats.items()}


async def test_reads_and_applies_take_one_round_trip_and_survive_a_flushed_script_cache(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=1 << 12, shards=16)
    # Few enough features that an apply and a read are one script call each (CALL_BYTES).
    ids, state = random_state(store, 800, seed=5)
    # A fresh script cache: each call answers NOSCRIPT once and runs again, loaded.
    await store.redis.script_flush()
    await store.shards.apply(1, store.spec.layout.records(ids, state))
    np.testing.assert_array_equal((await store.shards.read(ids)).state, state)
    before = await script_calls(store)
    await store.shards.apply(2, store.spec.layout.records(ids, state + 1))
    read = await store.shards.read(ids)
    np.testing.assert_array_equal(read.state, state + 1)
    after = await script_calls(store)
    # redis-py's pipelines of script objects ask SCRIPT EXISTS in a round trip of their own
    # before each execute; raw EVALSHAs do not.
    assert after.get("cmdstat_script|exists", 0) == before.get("cmdstat_script|exists", 0)
    assert after["cmdstat_evalsha"] - before["cmdstat_evalsha"] == 2
    await store.redis.script_flush()
    np.testing.assert_array_equal((await store.shards.read(ids)).state, state + 1)


async def test_the_encoding_is_part_of_the_model(make_store: MakeStore) -> None:
    store = await make_store("ftrl", encoding="compact")
    assert (await store.redis.hget(store.keys.meta, "encoding")) == b"compact"
    with pytest.raises(
        ModelMismatchError, match=r"OCTR_STATE_ENCODING=float64 \(stored: compact\)"
    ):
        await make_store("ftrl")
    # A model created before the setting existed says nothing of it: it is float64.
    other = await make_store("ftrl", name="older")
    await other.redis.hdel(other.keys.meta, "encoding")
    await make_store("ftrl", name="older")
    with pytest.raises(
        ModelMismatchError, match=r"OCTR_STATE_ENCODING=compact \(stored: float64\)"
    ):
        await make_store("ftrl", name="older", encoding="compact")


async def test_a_compact_model_serves_the_weights_of_what_it_stored(make_store: MakeStore) -> None:
    store = await make_store("ftrl", buckets=4096, shards=64, encoding="compact")
    await send(store, itertools.islice(read_examples(CRITEO, "criteo"), 1_500))
    await make_worker(store, batch_size=100).run_until_idle()
    stored = await scan_state(store)
    ids = np.array(list(stored), dtype=np.uint64)
    rows = np.array([stored[int(i)] for i in ids])
    expected = store.spec.rule.weights(rows, 1_500, store.spec.params)
    np.testing.assert_array_equal(await store.weights(ids), expected)
    assert np.count_nonzero(expected) > 100


async def test_bucket_keys_are_named_in_plain_decimal_at_every_digit_boundary(
    make_store: MakeStore,
) -> None:
    # The scripts assemble a bucket's decimal from its last three digits and the rest: every
    # boundary of that split must give the name Python gives.
    store = await make_store("ftrl", buckets=1 << 24, shards=4)
    buckets = [0, 7, 10, 99, 100, 999, 1000, 1001, 1010, 1100, 9999, 10000, 100_000, 123_456]
    buckets += [999_999, 1_000_000, 1_000_001, 16_777_215]
    high = np.uint64(12345) << np.uint64(24)
    ids = np.array(buckets, np.uint64) | high
    state = np.arange(2.0 * len(ids)).reshape(-1, 2)
    await store.shards.apply(1, store.spec.layout.records(ids, state))
    keys = store.keys
    names = {f"{keys.shard(b % 4).bucket_prefix}{b}".encode() for b in buckets}
    assert set(await store.redis.keys(keys.bucket_pattern)) == names
    read = await store.shards.read(ids)
    np.testing.assert_array_equal(read.state, state)
    assert read.stored.all()
