"""Exactly once and in order: one learner at a time, takeover, fencing, crashes, poison."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send
from workers.committer import MOST_WAITING
from workers.learn_group import learn_group

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))


async def assert_learned_once_in_order(store: ModelStore, examples: int) -> None:
    """The stored model is exactly the in-process replay of the first ``examples`` rows."""
    info = await store.info()
    stored = await scan_state(store)
    model = InMemoryModel(store.spec.rule, store.spec.params)
    replay(ROWS[:examples], model, FeatureHasher(), batch_size=1)
    assert info.t == model.t == examples
    expected = model.snapshot()
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    assert info.nonzero_weights == recount_nonzero(store, stored, info.t)
    assert info.features_tracked == len(stored)
    assert info.stream_lag == 0 and info.dead_letters == 0
    # Entries go once a later finalize learns they were applied. The last finalize can be
    # behind by a group being applied (at most MOST_WAITING commits) and, with its own, the
    # commits waiting behind it (fewer than MOST_WAITING before it): see committer.py.
    assert await store.redis.xlen(store.keys.redo) <= 2 * MOST_WAITING


async def test_one_worker_learns_while_the_others_stand_by(make_store: MakeStore) -> None:
    store = await make_store("fobos")
    await send(store, ROWS, per_entry=3)
    team = [make_worker(await make_store("fobos"), f"w{i}", batch_size=64) for i in range(3)]
    runs = [asyncio.create_task(worker.run()) for worker in team]
    while (await store.info()).t < len(ROWS):
        await asyncio.sleep(0.01)
    leaders = [worker for worker in team if worker.lease.token]
    for worker in team:
        worker.stop()
    await asyncio.wait_for(asyncio.gather(*runs), 10)
    assert len(leaders) == 1
    learned = [
        w.metrics.registry.get_sample_value(
            "online_ctr_learned_examples_total", {"model": "default"}
        )
        for w in team
    ]
    assert sorted(learned) == [0, 0, len(ROWS)]
    await assert_learned_once_in_order(store, len(ROWS))


async def test_a_standby_takes_over_within_the_lease_ttl_when_the_learner_dies(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    await send(store, ROWS)
    first = make_worker(await make_store(), "first", batch_size=100, lease_ttl_ms=300)
    assert await first._lead() and await first._step(block=False)
    died_at = asyncio.get_running_loop().time()  # after one group, without releasing its lease
    standby = make_worker(await make_store(), "standby", batch_size=100, lease_ttl_ms=300)
    assert await standby.run_until_idle() == 0  # the dead learner's lease still holds
    while not await standby._lead():
        await asyncio.sleep(0.01)
    assert asyncio.get_running_loop().time() - died_at < 0.3 + 0.1
    await standby.run_until_idle()
    await assert_learned_once_in_order(store, len(ROWS))


async def test_a_learner_that_lost_its_lease_cannot_commit(make_store: MakeStore) -> None:
    store = await make_store()
    await send(store, ROWS[:300])
    stale = make_worker(await make_store(), "stale", batch_size=100, lease_ttl_ms=100)
    assert await stale._lead()
    group = await stale.stream.next_group(100)
    assert group.batch is not None
    learning = await learn_group(store, stale.cache, group.batch, group.entry_ids, stale.mirror)
    await asyncio.sleep(0.15)  # it stalls past its TTL; another worker takes over
    fresh = make_worker(await make_store(), "fresh", batch_size=100)
    assert await fresh.run_until_idle() == 3
    commit = await store.log.finalize(learning.change, stale.lease.token, 0)
    assert commit.status == "fenced"
    await assert_learned_once_in_order(store, 300)


async def test_a_commit_finalized_but_not_applied_is_replayed_by_the_next_learner(
    make_store: MakeStore,
) -> None:
    store = await make_store("rda")
    await send(store, ROWS[:500])
    crashed = make_worker(await make_store("rda"), "crashed", batch_size=200, lease_ttl_ms=100)
    assert await crashed._lead()
    group = await crashed.stream.next_group(200)
    assert group.batch is not None
    learning = await learn_group(store, crashed.cache, group.batch, group.entry_ids, crashed.mirror)
    commit = await store.log.finalize(learning.change, crashed.lease.token, 0)
    assert commit.status == "ok"  # ... and it died before applying it to the shards
    assert await store.redis.xlen(store.keys.redo) >= 1
    await asyncio.sleep(0.15)
    survivor = make_worker(await make_store("rda"), "survivor", batch_size=200)
    await survivor.run_until_idle()
    await assert_learned_once_in_order(store, 500)


async def test_an_undecodable_entry_goes_to_the_dead_letter_stream_at_once(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    await send(store, ROWS[:10])
    poison = await store.redis.xadd(store.keys.stream, {"b": b"not an entry"})
    await send(store, ROWS[10:20])
    worker = make_worker(store, "w1", batch_size=8)
    await worker.run_until_idle()
    dead = await store.redis.xrange(store.keys.dead)
    assert len(dead) == 1
    fields = dead[0][1]
    assert fields[b"entry"] == poison and b"undecodable entry" in fields[b"reason"]
    assert fields[b"b"] == b"not an entry"
    info = await store.info()
    assert (info.t, info.stream_lag, info.dead_letters) == (20, 0, 1)
    await assert_learned_once_in_order_but(store, dead_letters=1, examples=20)


async def assert_learned_once_in_order_but(
    store: ModelStore, dead_letters: int, examples: int
) -> None:
    info = await store.info()
    assert info.dead_letters == dead_letters
    stored = await scan_state(store)
    model = InMemoryModel(store.spec.rule, store.spec.params)
    replay(ROWS[:examples], model, FeatureHasher(), batch_size=1)
    for feature, row in model.snapshot().items():
        np.testing.assert_array_equal(stored[feature], row[:-1])


async def test_a_head_that_keeps_coming_back_is_isolated_and_dead_lettered(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    await send(store, ROWS[:30], per_entry=3)
    worker = make_worker(store, "w1", batch_size=30, max_deliveries=2)
    head = (await store.redis.xrange(store.keys.stream, count=1))[0][0]
    # A learner that crashed on this group twice (each delivery counted, nothing committed).
    await store.redis.hset(store.keys.failures, mapping={head: 2, head + b":why": "it crashed"})
    await worker.run_until_idle()
    dead = await store.redis.xrange(store.keys.dead)
    assert [d[1][b"entry"] for d in dead] == [head]
    assert dead[0][1][b"reason"] == b"it crashed (after 2 deliveries)"
    info = await store.info()
    assert (info.t, info.stream_lag) == (27, 0)


async def test_stop_finishes_the_group_in_flight_and_takes_no_more(make_store: MakeStore) -> None:
    store = await make_store()
    await send(store, ROWS)
    worker = make_worker(store, "w1", batch_size=50)
    running = asyncio.create_task(worker.run())
    while (await store.info()).t == 0:
        await asyncio.sleep(0.001)
    worker.stop()
    await asyncio.wait_for(running, 10)
    info = await store.info()
    assert 0 < info.t < len(ROWS) and info.t % 50 == 0
    assert info.stream_lag == len(ROWS) - info.t
    assert await store.redis.get(store.keys.lease) is None  # released for a standby


async def test_a_learner_of_a_deleted_model_starts_over_on_the_new_one(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    await send(store, ROWS[:200])
    worker = make_worker(await make_store(), "w1", batch_size=100)
    assert await worker.run_until_idle() == 2
    assert await store.delete() > 0
    await send(store, ROWS[:300])
    await worker.run_until_idle()  # fenced once, then learns the new model from scratch
    await assert_learned_once_in_order(store, 300)


async def test_a_commit_whose_answer_was_lost_is_not_learned_again(make_store: MakeStore) -> None:
    store = await make_store()
    await send(store, ROWS[:300])
    worker = make_worker(store, "w1", batch_size=100)
    assert await worker._lead()
    group = await worker.stream.next_group(100)
    assert group.batch is not None
    learning = await learn_group(store, worker.cache, group.batch, group.entry_ids, worker.mirror)
    # Redis ran the commit, but the worker saw a timeout (as when Redis stalls mid-call).
    assert (await store.log.finalize(learning.change, worker.lease.token, 0)).status == "ok"
    worker._reset()
    await worker.run_until_idle()
    await assert_learned_once_in_order(store, 300)
