"""A worker that lingers (``OCTR_BATCH_LINGER_MS``) learns a trickle of feedback in fewer,
larger groups, and the model is the same: learning is example by example whatever the group.
A worker that does not linger learns each entry as it comes."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from online_ctr.learning.readers import read_examples
from online_ctr.store.state import ModelStore
from tests.conftest import CRITEO
from tests.workers.conftest import MakeStore, make_worker, send
from tests.workers.test_grouped_applies import assert_equals_replay
from workers.consumer import Worker

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 5))


async def commits_of_a_trickle(store: ModelStore, worker: Worker, gap_s: float) -> int:
    """The commits ``worker`` makes of :data:`ROWS` sent one entry at a time, ``gap_s`` apart
    (a running worker, as in production), once it has learned them all."""
    running = asyncio.create_task(worker.run())
    try:
        for row in ROWS:
            await send(store, [row])
            await asyncio.sleep(gap_s)
        async with asyncio.timeout(20):
            while (await store.info()).t < len(ROWS):
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await running
    return int(await store.redis.hget(store.keys.meta, "seq") or 0)


async def test_a_lingering_worker_learns_a_trickle_in_one_or_two_groups(
    make_store: MakeStore,
) -> None:
    """5 entries within about 0.1 s and a linger of 1 s: the first arrival starts the linger
    (the worker was idle), so one group, or two if a linger ended between two entries."""
    store = await make_store("ftrl", buckets=64, shards=8)
    worker = make_worker(store, batch_wait_ms=5, batch_linger_ms=1000)
    assert await commits_of_a_trickle(store, worker, 0.02) <= 2
    await assert_equals_replay(store, len(ROWS))


async def test_a_worker_that_does_not_linger_learns_each_entry_as_it_comes(
    make_store: MakeStore,
) -> None:
    """The same trickle, 0.3 s apart: far longer than a commit of one example takes, so
    entries are learned one by one (at least 3 groups of 5, should a commit be slow)."""
    store = await make_store("ftrl", buckets=64, shards=8)
    worker = make_worker(store, batch_wait_ms=5)
    assert await commits_of_a_trickle(store, worker, 0.3) >= 3
    await assert_equals_replay(store, len(ROWS))
