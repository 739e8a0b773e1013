"""The serving copy of hot features answers exactly what the shards hold, as of the latest
commit, through commits, trims, deletes and evictions."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from online_ctr.learning.budget import Budget
from online_ctr.learning.readers import read_examples
from online_ctr.store.replica import MOST_COMMITS, StateReplica
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, scan_state, send
from tests.workers.test_store_lookup import random_state, script_calls

pytestmark = pytest.mark.anyio


def replica_of(store: ModelStore, max_features: int = 1_000_000) -> StateReplica:
    return StateReplica(store.keys, store.spec.layout, store.scripts, max_features)


async def truth(store: ModelStore, ids: np.ndarray) -> np.ndarray:
    state: np.ndarray = (await store.shards.read(ids)).state
    return state


async def served(replica: StateReplica, ids: np.ndarray) -> np.ndarray:
    fresh = await replica.read(ids)
    assert fresh is not None
    return fresh.state


async def model_of(
    make_store: MakeStore,
    count: int,
    seed: int,
    applied: bool,
    rule: str = "ftrl",
    buckets: int = 1 << 8,
    shards: int = 4,
) -> tuple[ModelStore, np.ndarray, np.ndarray]:
    """A new model and ``count`` random features' states; with ``applied``, those are its
    state (commit 1 in the shards), else it has none yet."""
    store = await make_store(rule, buckets=buckets, shards=shards)
    ids, state = random_state(store, count, seed=seed)
    await store.ensure()
    if applied:
        await store.shards.apply(1, store.spec.layout.records(ids, state))
    return store, ids, state


async def commit_unapplied(store: ModelStore, ids: np.ndarray, state: np.ndarray) -> int:
    """Record a commit in the redo log as finalize.lua does, and leave the shards alone (a
    learner between its two steps)."""
    seq = int(await store.redis.hincrby(store.keys.meta, "seq", 1))
    fields = {f"s{shard}": blob for shard, blob in store.spec.layout.records(ids, state)}
    # And the shards' commits before it, which the copy must not take for records.
    fields["prior"] = " ".join(f"{name}:{seq - 1}" for name in fields)
    await store.redis.xadd(store.keys.redo, fields, id=f"{seq}-1")
    return seq


@pytest.mark.parametrize("encoding", ["float64", "compact"])
async def test_the_copy_follows_every_commit_of_a_learning_worker(
    make_store: MakeStore, encoding: str
) -> None:
    store = await make_store("ftrl", buckets=1 << 10, shards=16, encoding=encoding)
    replica = replica_of(store)
    rows = list(itertools.islice(read_examples(CRITEO, "criteo"), 3_000))
    worker = make_worker(store, batch_size=100)
    rng = np.random.default_rng(1)
    for first in range(0, len(rows), 500):
        await send(store, rows[first : first + 500])
        await worker.run_until_idle()
        ids = np.array(list(await scan_state(store)), np.uint64)
        # A sample, and unknown ids: each pass caches some features and finds others.
        asked = np.unique(
            np.concatenate([rng.choice(ids, len(ids) // 3), rng.integers(0, 2**63, 50, np.uint64)])
        )
        np.testing.assert_array_equal(await served(replica, asked), await truth(store, asked))
        fresh = await replica.read(asked)
        assert fresh is not None and fresh.t == (await store.info()).t
    assert len(replica) > 1_000


async def test_an_idle_learner_trims_so_a_pass_reads_no_shard_progress(
    make_store: MakeStore,
) -> None:
    """Once the learner is idle its last commit is trimmed from the redo log, so a pass that
    reads features the copy lacks reads no shard's 'applied' key (a GET each in serve.lua),
    and is still exact; while a commit is not in every shard, those keys are read."""
    store = await make_store("ftrl", buckets=1 << 10, shards=16)
    rows = list(itertools.islice(read_examples(CRITEO, "criteo"), 400))
    await send(store, rows, per_entry=100)
    assert await make_worker(store, batch_size=100).run_until_idle() == 4
    seq, trimmed = await store.redis.hmget(store.keys.meta, "seq", "trimmed")
    assert int(trimmed) == int(seq) == 4 and await store.redis.xlen(store.keys.redo) == 0
    ids = np.array(sorted(await scan_state(store)), np.uint64)
    replica = replica_of(store)
    await served(replica, ids[:1])  # the copy's first call starts it (a reset, then a read)
    for part in np.array_split(ids[1:], 4):  # each pass lacks its features: it reads them
        expected = await truth(store, part)
        before = await script_calls(store)
        np.testing.assert_array_equal(await served(replica, part), expected)
        after = await script_calls(store)
        assert after["cmdstat_evalsha"] - before["cmdstat_evalsha"] == 1
        assert after.get("cmdstat_get") == before.get("cmdstat_get")
    # A commit the shards lack: the pass reads its shards' progress, and takes the commit.
    extra = random_state(store, 50, seed=11)
    await commit_unapplied(store, *extra)
    before = await script_calls(store)
    np.testing.assert_array_equal(await served(replica, extra[0]), extra[1])
    assert (await script_calls(store))["cmdstat_get"] > before.get("cmdstat_get", 0)


async def test_a_commit_is_served_before_its_shards_have_it(make_store: MakeStore) -> None:
    store, ids, state = await model_of(make_store, 500, 2, applied=False, rule="fobos")
    replica = replica_of(store)
    np.testing.assert_array_equal(await served(replica, ids), np.zeros_like(state))
    seq = await commit_unapplied(store, ids[:300], state[:300])
    expected = np.zeros_like(state)
    expected[:300] = state[:300]
    np.testing.assert_array_equal(await served(replica, ids), expected)
    # Two more commits, one touching features of the first again: the last value holds.
    await commit_unapplied(store, ids[200:400], state[200:400] + 1)
    await commit_unapplied(store, ids[250:260], state[250:260] + 2)
    expected[200:400] = state[200:400] + 1
    expected[250:260] = state[250:260] + 2
    np.testing.assert_array_equal(await served(replica, ids), expected)
    assert replica.seq == seq + 2
    # The shards catch up; nothing the copy serves changes.
    await store.shards.apply(seq, store.spec.layout.records(ids[:300], state[:300]))
    np.testing.assert_array_equal(await served(replica, ids), expected)


async def test_a_pass_of_cached_features_costs_redis_one_call_and_no_feature_reads(
    make_store: MakeStore,
) -> None:
    store, ids, state = await model_of(
        make_store, 2_000, 5, applied=True, buckets=1 << 12, shards=16
    )
    replica = replica_of(store)
    np.testing.assert_array_equal(await served(replica, ids), state)
    before = await script_calls(store)
    np.testing.assert_array_equal(await served(replica, ids), state)
    after = await script_calls(store)
    assert after["cmdstat_evalsha"] - before["cmdstat_evalsha"] == 1
    assert after["cmdstat_hget"] == before["cmdstat_hget"]
    # A flushed script cache: the call loads the script and still answers.
    await store.redis.script_flush()
    np.testing.assert_array_equal(await served(replica, ids), state)


async def test_the_copy_starts_again_when_it_missed_trimmed_commits(make_store: MakeStore) -> None:
    store, ids, state = await model_of(make_store, 400, 3, applied=False)
    replica = replica_of(store)
    np.testing.assert_array_equal(await served(replica, ids), np.zeros_like(state))
    # Two commits, applied and trimmed while this process was idle.
    seq = await commit_unapplied(store, ids, state)
    await store.shards.apply(seq, store.spec.layout.records(ids, state))
    seq = await commit_unapplied(store, ids[:100], state[:100] * 3)
    expected = state.copy()
    expected[:100] *= 3
    await store.shards.apply(seq, store.spec.layout.records(ids[:100], expected[:100]))
    await store.log.trim(seq)
    assert await store.redis.xlen(store.keys.redo) == 0
    np.testing.assert_array_equal(await served(replica, ids), expected)
    # More commits than a reply carries, none applied yet: the copy cannot be brought up to
    # date (the caller reads the shards); once they are applied, it can.
    commits = []
    for k in range(40):
        expected[k] = state[k] + k
        commits.append((await commit_unapplied(store, ids[k : k + 1], expected[k : k + 1]), k))
    assert await replica.read(ids) is None
    for seq, k in commits:
        await store.shards.apply(
            seq, store.spec.layout.records(ids[k : k + 1], expected[k : k + 1])
        )
    np.testing.assert_array_equal(await served(replica, ids), expected)


async def test_a_deleted_model_is_never_served_from_the_copy(make_store: MakeStore) -> None:
    store, ids, state = await model_of(make_store, 300, 4, applied=True)
    replica = replica_of(store)
    np.testing.assert_array_equal(await served(replica, ids), state)
    await store.delete()
    assert await replica.read(ids) is None  # no model: the caller reads the shards
    await store.ensure()  # created again, empty, under a new epoch
    np.testing.assert_array_equal(await served(replica, ids), np.zeros_like(state))
    np.testing.assert_array_equal((await store.serving(ids)).weights, np.zeros(len(ids)))


async def test_the_copy_holds_at_most_its_bound(make_store: MakeStore) -> None:
    store, ids, state = await model_of(make_store, 3_000, 6, applied=True)
    replica = replica_of(store, max_features=1_000)
    for first in range(0, len(ids), 700):
        part = ids[first : first + 700]
        np.testing.assert_array_equal(await served(replica, part), state[first : first + 700])
        assert len(replica) <= 1_000
    # A pass larger than the bound is served whole and not kept.
    np.testing.assert_array_equal(await served(replica, ids), state)
    assert len(replica) <= 1_000


async def test_overlapping_passes_during_commits_each_see_a_committed_state(
    make_store: MakeStore,
) -> None:
    store, ids, state = await model_of(make_store, 600, 8, applied=False)
    replica = replica_of(store)
    versions = [np.zeros_like(state)]
    for k in range(1, 6):
        versions.append(state * k)

    async def commits() -> None:
        for k in range(1, 6):
            await commit_unapplied(store, ids, versions[k])
            await asyncio.sleep(0)

    parts = [ids[i::3] for i in range(3)]
    results = await asyncio.gather(
        commits(), *(replica.read(part) for part in parts for _ in range(4))
    )
    for index, fresh in enumerate(results[1:]):
        assert fresh is not None
        # Every row of a pass is of one committed version, the same one for the whole pass:
        # the call is atomic.
        rows = [version[index // 4 :: 3] for version in versions]
        assert any(np.array_equal(fresh.state, r) for r in rows), "a pass mixed commits"
    np.testing.assert_array_equal(await served(replica, ids), versions[-1])


async def test_of_commits_the_copy_has_a_pass_takes_only_the_lagging_shards_it_reads(
    make_store: MakeStore,
) -> None:
    store, ids, state = await model_of(make_store, 400, 7, applied=False)
    layout = store.spec.layout
    replica = replica_of(store)
    # Commit 1 touches every shard and no shard has it; the copy takes it whole.
    await commit_unapplied(store, ids, state)
    np.testing.assert_array_equal(await served(replica, ids), state)
    # A feature of shard 0 the copy lacks: of commit 1 only shard 0's records come back.
    candidates = np.random.default_rng(8).integers(0, 2**63, 100, np.uint64)
    unknown = candidates[layout.shard_of(candidates) == 0][:1]
    head = [layout.field_bytes, layout.value_bytes, *store.keys.bucket_prefix_parts]
    asked_records = layout.reads(unknown).tobytes()
    reply = await store.scripts.serve(
        keys=[store.keys.meta],
        args=[
            replica.epoch,
            replica.seq,
            MOST_COMMITS,
            *head,
            store.keys.applied_tail,
            asked_records,
            store.keys.redo,
        ],
    )
    assert reply[0] == b"ok" and reply[8] == dict(layout.records(ids, state))[0]
    asked = np.concatenate([ids, unknown])
    expected = np.vstack([state, np.zeros((1, layout.width))])
    np.testing.assert_array_equal(await served(replica, asked), expected)


async def test_the_copies_of_several_models_share_one_budget(make_store: MakeStore) -> None:
    """Three models' copies under one budget of 600 features: the sum never passes it, the
    largest copy starts again, and every answer is still what the shards hold."""
    budget = Budget(600)
    models = [await model_of(make_store, 1000, seed, applied=True) for seed in range(3)]
    copies = [
        StateReplica(store.keys, store.spec.layout, store.scripts, 1_000_000, budget)
        for store, _, _ in models
    ]
    rng = np.random.default_rng(7)
    for _ in range(20):
        for copy, (store, ids, _) in zip(copies, models, strict=True):
            asked = np.unique(rng.choice(ids, 150))
            assert np.array_equal(await served(copy, asked), await truth(store, asked))
            assert budget.held() <= 600
    assert budget.forgotten > 0
