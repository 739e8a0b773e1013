"""A copy that read the model whole answers features no pass read without reading them, and
stays exactly what the shards hold: through commits that add and delete features, commits made
while it was being read, a model too large for it, and a redo log trimmed past it."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import redis
import redis.asyncio as aioredis

from online_ctr.learning.budget import Budget
from online_ctr.learning.readers import read_examples
from online_ctr.store import replica as replica_module
from online_ctr.store import snapshot_scan, whole_copy
from online_ctr.store.acl import ROLES, user_rules
from online_ctr.store.replica import StateReplica
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, scan_state, send
from tests.workers.test_replica import commit_unapplied, model_of, served, truth
from tests.workers.test_store_lookup import random_state, script_calls

pytestmark = pytest.mark.anyio


def whole_replica(
    store: ModelStore, max_features: int = 1_000_000, budget: Budget | None = None
) -> StateReplica:
    layout = store.spec.layout
    return StateReplica(store.keys, layout, store.scripts, max_features, budget, None, store.redis)


async def read_whole(replica: StateReplica, ids: np.ndarray) -> None:
    """A pass (which starts the whole read), then the read's end."""
    await served(replica, ids)
    if replica.reading is not None:
        await replica.reading


async def applied_model(
    make_store: MakeStore, count: int, seed: int
) -> tuple[ModelStore, np.ndarray, np.ndarray]:
    """A model whose shards hold ``count`` random features' states as its commit 1."""
    store, ids, state = await model_of(make_store, count, seed, applied=True)
    await store.redis.hset(store.keys.meta, mapping={"seq": 1, "trimmed": 1})
    return store, ids, state


def unknown(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**63, count, np.uint64)


async def test_features_no_pass_read_cost_no_feature_read(make_store: MakeStore) -> None:
    store = await make_store("ftrl", buckets=1 << 10, shards=16)
    await send(store, list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000)))
    await make_worker(store, batch_size=500).run_until_idle()
    ids = np.array(sorted(await scan_state(store)), np.uint64)
    replica = whole_replica(store)
    await read_whole(replica, ids[:1])
    assert replica.whole and len(replica) == len(ids)
    asked = np.unique(np.concatenate([ids[1::3], unknown(50, 1)]))
    expected = await truth(store, asked)
    before = await script_calls(store)
    np.testing.assert_array_equal(await served(replica, asked), expected)
    after = await script_calls(store)
    assert after["cmdstat_evalsha"] - before["cmdstat_evalsha"] == 1
    assert after.get("cmdstat_hget") == before.get("cmdstat_hget")  # no feature read


async def test_commits_that_add_and_delete_features_reach_a_whole_copy(
    make_store: MakeStore,
) -> None:
    store, ids, state = await applied_model(make_store, 500, seed=1)
    replica = whole_replica(store)
    await read_whole(replica, ids[:1])
    assert replica.whole
    layout = store.spec.layout
    added = random_state(store, 100, seed=2)  # features no pass has read
    seq = await commit_unapplied(store, *added)
    gone = np.zeros((50, layout.width))
    seq = await commit_unapplied(store, ids[:50], gone)
    asked = np.concatenate([ids, added[0]])
    fresh = await replica.read(asked)
    assert fresh is not None and replica.whole and replica.seq == seq
    np.testing.assert_array_equal(fresh.state, np.vstack([gone, state[50:], added[1]]))
    # The shards catch up, deleting: the copy still answers what they hold.
    await store.shards.apply(seq - 1, layout.records(*added))
    deleted = np.ones(50, np.bool_)
    await store.shards.apply(seq, layout.records(ids[:50], state[:50], deleted=deleted))
    np.testing.assert_array_equal(await served(replica, asked), await truth(store, asked))


async def test_commits_made_while_the_model_is_read_are_brought_in(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Buckets read at different commits: the records of every commit since the read began
    make the copy exact."""
    monkeypatch.setattr(whole_copy, "FIELDS_PER_CALL", 40)  # many calls to commit between
    monkeypatch.setattr(whole_copy, "BUCKETS_PER_CALL", 5)  # and shards read in parts
    store, ids, state = await applied_model(make_store, 1_000, seed=3)
    layout = store.spec.layout
    replica = whole_replica(store)
    rng = np.random.default_rng(4)
    everything = {int(i): row for i, row in zip(ids, state, strict=True)}
    await served(replica, ids[:1])
    reading = replica.reading
    assert reading is not None
    commits = 0
    while not reading.done():
        changed = rng.choice(ids, 30, replace=False)
        new_ids, new_state = random_state(store, 10, seed=10 + commits)
        both = np.concatenate([changed, new_ids])
        rows = np.vstack([rng.normal(size=(30, layout.width)), new_state])
        seq = await commit_unapplied(store, both, rows)
        await store.shards.apply(seq, layout.records(both, rows))
        everything |= {int(i): row for i, row in zip(both, rows, strict=True)}
        commits += 1
        # A pass meanwhile is exact, and keeps nothing: the copy and the table being read
        # together stay within the bound.
        sample = changed[:5]
        fresh = await served(replica, sample)
        np.testing.assert_array_equal(fresh, [everything[int(i)] for i in sample])
        assert len(replica) == 0 or replica.whole
    await reading
    assert replica.whole and commits >= 2
    asked = np.array(sorted(everything), np.uint64)
    expected = np.array([everything[int(i)] for i in asked])
    np.testing.assert_array_equal(await served(replica, asked), expected)
    np.testing.assert_array_equal(expected, await truth(store, asked))


async def test_a_model_larger_than_the_room_is_not_read_whole(make_store: MakeStore) -> None:
    store, ids, state = await model_of(make_store, 1_500, seed=5, applied=True)
    # Its count of tracked features says too many: not read.
    await store.redis.hset(store.keys.meta, "tracked", 1_001)
    small = whole_replica(store, max_features=1_000)
    await read_whole(small, ids[:100])
    assert not small.whole
    # It says few (a count this test did not keep), and the read finds more: dropped.
    await store.redis.hset(store.keys.meta, "tracked", 10)
    small._read_after = 0.0
    await read_whole(small, ids[100:200])
    assert not small.whole and len(small) <= 1_000
    np.testing.assert_array_equal(await served(small, ids[:700]), state[:700])
    # Two models sharing a budget: the second gets the room the first leaves.
    budget = Budget(2_000)
    first = whole_replica(store, budget=budget)
    await read_whole(first, ids[:1])
    assert first.whole and budget.held() == 1_500
    other = await make_store("ftrl", buckets=1 << 8, shards=4, name="other")
    other_ids, other_state = random_state(other, 600, seed=6)
    await other.shards.apply(1, other.spec.layout.records(other_ids, other_state))
    second = whole_replica(other, budget=budget)
    await read_whole(second, other_ids[:1])
    assert not second.whole and budget.held() <= 2_000


async def test_a_copy_trimmed_past_starts_again_and_is_read_whole_again(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lost to the redo log's trim, the copy is read whole again after twice the wait (a
    model that commits faster than predictions come would mostly be read to be dropped)."""
    monkeypatch.setattr(replica_module, "WHOLE_RETRY_S", 100.0)
    store, ids, state = await applied_model(make_store, 400, seed=7)
    layout = store.spec.layout
    replica = whole_replica(store)
    await read_whole(replica, ids[:1])
    assert replica.whole
    # Commits applied and trimmed while this process was idle: the copy cannot follow them.
    for k in range(2):
        state[k::3] += 1
        seq = await commit_unapplied(store, ids[k::3], state[k::3])
        await store.shards.apply(seq, layout.records(ids[k::3], state[k::3]))
    await store.log.trim(seq)
    np.testing.assert_array_equal(await served(replica, ids), state)
    assert not replica.whole and replica.reading is None  # started again; not read yet
    assert 199.0 < replica._read_after - time.monotonic() <= 200.0
    replica._read_after = 0.0  # the wait is over
    await read_whole(replica, ids[:1])
    assert replica.whole
    extra = unknown(20, 8)
    np.testing.assert_array_equal(
        await served(replica, np.concatenate([ids, extra])), np.vstack([state, 0 * state[:20]])
    )


async def test_a_read_waits_for_the_learner_to_apply_and_is_dropped_if_trimmed_past(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read starts once every commit is in every shard (else the learner's trim, once idle,
    would start the copy again at its first call), and one that the redo log's trim passed
    while it read is not kept; passes stay exact throughout."""
    monkeypatch.setattr(replica_module, "WHOLE_SETTLE_S", 0.0)
    monkeypatch.setattr(whole_copy, "FIELDS_PER_CALL", 40)
    store, ids, state = await applied_model(make_store, 600, seed=11)
    layout = store.spec.layout
    replica = whole_replica(store)
    changed = ids[::5], state[::5] + 1
    seq = await commit_unapplied(store, *changed)  # a learner between its two steps
    await read_whole(replica, ids[:1])
    assert not replica.whole and len(replica) == 1
    await store.shards.apply(seq, layout.records(*changed))
    await store.log.trim(seq)
    state[::5] += 1
    await served(replica, ids[1:2])  # the read starts
    reading = replica.reading
    assert reading is not None
    later = ids[1::5], state[1::5] * 2
    seq = await commit_unapplied(store, *later)
    await store.shards.apply(seq, layout.records(*later))
    await store.log.trim(seq)  # while the model is read
    state[1::5] *= 2
    await reading
    assert not replica.whole
    np.testing.assert_array_equal(await served(replica, ids), state)
    replica._read_after = 0.0
    await read_whole(replica, ids[:1])
    assert replica.whole
    np.testing.assert_array_equal(await served(replica, ids), state)


async def test_the_api_user_reads_a_model_whole_large_buckets_too(
    make_store: MakeStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API's Redis user (online-ctr redis-acl's rules) may read a model whole: the scan
    script, declared on a shard's route key, and HSCAN for a bucket too large for one call."""
    monkeypatch.setattr(snapshot_scan, "LARGEST_READ_WHOLE", 4)  # most buckets paged
    store, ids, state = await applied_model(make_store, 2_000, seed=12)
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "LOG", "RESET")
    admin.execute_command("ACL", "SETUSER", "api-whole", *user_rules(ROLES["api"], "pw"))
    limited = aioredis.Redis.from_url(redis_url.replace("redis://", "redis://api-whole:pw@"))
    try:
        as_api = ModelStore(limited, store.spec)
        replica = StateReplica(
            store.keys, store.spec.layout, as_api.scripts, 1_000_000, None, None, limited
        )
        await read_whole(replica, ids[:1])
        assert replica.whole and len(replica) == len(ids)
        np.testing.assert_array_equal(await served(replica, ids), state)
        assert admin.execute_command("ACL", "LOG") == []
    finally:
        await limited.aclose()
        admin.execute_command("ACL", "DELUSER", "api-whole")
        admin.close()
