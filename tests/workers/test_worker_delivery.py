"""Exactly-once application: crashes, slow workers, concurrent workers, poison entries."""

from __future__ import annotations

import asyncio
import itertools

import anyio
import pytest

from octr.store.keys import GROUP
from octr.store.state import ModelStore
from online_ctr.readers import read_examples
from tests.conftest import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send
from workers.batch import apply, decode
from workers.cache import StateCache

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))


async def assert_applied_once(store: ModelStore, occurrences: int, examples: int) -> None:
    """Every example counted once in t, every occurrence once in the counts, nothing left."""
    info = await store.info()
    rows = await scan_state(store)
    assert info.t == examples
    assert sum(row[-1] for row in rows.values()) == occurrences
    assert info.nonzero_weights == recount_nonzero(store, rows, info.t)
    assert info.features_tracked == len(rows)
    assert info.stream_lag == 0 and info.dead_letters == 0
    pending = await store.redis.xpending(store.keys.stream, GROUP)
    assert pending["pending"] == 0


@pytest.mark.parametrize("workers", [2, 4])
@pytest.mark.parametrize("rule", ["ftrl", "fobos"])
async def test_concurrent_workers_apply_every_example_once(
    make_store: MakeStore, workers: int, rule: str
) -> None:
    store = await make_store(rule)
    occurrences = await send(store, ROWS, per_entry=3)
    # Each worker has its own connection, so their commits really interleave at Redis.
    team = [
        make_worker(await make_store(rule), f"w{i}", batch_size=16, commit_batches=2)
        for i in range(workers)
    ]
    async with anyio.create_task_group() as group:
        for worker in team:
            group.start_soon(worker.run_until_idle)
    await assert_applied_once(store, occurrences, len(ROWS))
    conflicts = sum(
        w.metrics.registry.get_sample_value(
            "online_ctr_commit_conflicts_total", {"model": "default"}
        )
        or 0
        for w in team
    )
    assert conflicts > 0, "the workers never raced; the test did not test concurrency"


async def test_batch_of_a_worker_killed_before_commit_is_reclaimed_and_applied_once(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    occurrences = await send(store, ROWS[:300])
    crashed = make_worker(store, "crashed", batch_size=100)
    taken = await crashed.stream.read_new(100, 0, block=False)  # then it died before commit
    assert len(taken.messages) == 100
    survivor = make_worker(store, "survivor", batch_size=100, reclaim_idle_ms=50)
    await survivor.run_until_idle()  # the new entries; the crashed batch is not idle yet
    await asyncio.sleep(0.1)
    await survivor.run_until_idle()  # now it is: reclaimed
    await assert_applied_once(store, occurrences, 300)


async def test_a_slow_worker_whose_batch_was_reclaimed_cannot_commit_it(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    occurrences = await send(store, ROWS[:50])
    slow = make_worker(store, "slow", batch_size=50)
    taken = await slow.stream.read_new(50, 0, block=False)
    await asyncio.sleep(0.1)
    fast = make_worker(store, "fast", batch_size=50, reclaim_idle_ms=50)
    await fast.run_until_idle()
    cache = StateCache(store.spec.width, store.spec.buckets, 1000)
    # With the claims counter it saw before taking the entries, and without it (which forces
    # the per-entry owner check): either way the commit is refused.
    for claims in (taken.claims, ""):
        result, _ = await apply(store, cache, "slow", decode(taken.messages, claims))
        assert result.status == "fenced"
    await assert_applied_once(store, occurrences, 50)


async def test_an_entry_that_keeps_failing_goes_to_the_dead_letter_stream(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    occurrences = await send(store, ROWS[:10])
    poison = await store.redis.xadd(store.keys.stream, {"b": b"not an entry"})
    worker = make_worker(store, "w1", reclaim_idle_ms=20, max_deliveries=2)
    for _ in range(5):
        await worker.run_until_idle()
        await asyncio.sleep(0.05)
    dead = await store.redis.xrange(store.keys.dead)
    assert len(dead) == 1
    fields = dead[0][1]
    assert fields[b"entry"] == poison
    assert b"undecodable entry" in fields[b"reason"] and b"after 2 deliveries" in fields[b"reason"]
    assert fields[b"b"] == b"not an entry"
    info = await store.info()
    assert (info.t, info.stream_lag, info.dead_letters) == (10, 0, 1)
    rows = await scan_state(store)
    assert sum(row[-1] for row in rows.values()) == occurrences


async def test_stop_finishes_the_batch_in_flight_and_takes_no_more(make_store: MakeStore) -> None:
    store = await make_store()
    await send(store, ROWS)
    worker = make_worker(store, "w1", batch_size=50)
    running = asyncio.create_task(worker.run())
    while (await store.info()).t == 0:
        await asyncio.sleep(0.001)
    worker.stop()
    await asyncio.wait_for(running, 10)
    info = await store.info()
    # What was fetched when the stop came (the batch in flight and the one read ahead) was
    # applied; nothing after it was read, and nothing is left half-done.
    assert 0 < info.t < len(ROWS) and info.t % 50 == 0
    assert info.stream_lag == len(ROWS) - info.t
    pending = await store.redis.xpending(store.keys.stream, GROUP)
    assert pending["pending"] == 0
