"""A worker that lingers (``OCTR_BATCH_LINGER_MS``) learns a trickle of feedback in fewer,
larger groups, and the model is the same: learning is example by example whatever the group.
(Without the linger the same trickle makes 5 commits: checked by disabling it.)"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from online_ctr.learning.readers import read_examples
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, send
from tests.workers.test_grouped_applies import assert_equals_replay
from workers.learner_loop import Worker

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 6))


async def commits_of_a_trickle(store: ModelStore, worker: Worker, gap_s: float) -> int:
    """The commits ``worker`` makes of :data:`ROWS` but the first sent one entry at a time,
    ``gap_s`` apart (a running worker, as in production), once it has learned them all. The
    first is learned before, alone: compiling the learner then would hold the event loop, and
    the trickle with it, for seconds."""
    await send(store, ROWS[:1])
    assert await worker.run_until_idle() == 1
    running = asyncio.create_task(worker.run())
    try:
        for row in ROWS[1:]:
            await send(store, [row])
            await asyncio.sleep(gap_s)
        async with asyncio.timeout(20):
            while (await store.info()).t < len(ROWS):
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await running
    return int(await store.redis.hget(store.keys.meta, "seq") or 0) - 1


async def test_a_lingering_worker_learns_a_trickle_in_one_or_two_groups(
    make_store: MakeStore,
) -> None:
    """5 entries within about 0.1 s and a linger of 1 s: the first arrival starts the linger
    (the worker was idle), so one group, or two if a linger ended between two entries."""
    store = await make_store("ftrl", buckets=64, shards=8)
    worker = make_worker(store, batch_wait_ms=5, batch_linger_ms=1000)
    assert await commits_of_a_trickle(store, worker, 0.02) <= 2
    await assert_equals_replay(store, len(ROWS))
