"""A model whose stored step is no whole number is a damaged model to its worker: one clear
line, nothing written, retried until mended (as a meta finalize answers 'damaged' for), where
``int(t)`` raised ValueError out of the worker's loop when it took the lease."""

from __future__ import annotations

import asyncio
import logging

import pytest

from online_ctr.learning.features import Example
from tests.workers.conftest import MakeStore, make_worker, send
from tests.workers.test_nonfinite import ROWS, assert_equals_replay

pytestmark = pytest.mark.anyio

FIRST: list[tuple[Example, int]] = list(ROWS[:10])


@pytest.mark.parametrize("step", ["x", "1.5", "-3", " 7", "1e3"])
async def test_a_step_that_is_no_whole_number_is_waited_on_not_fatal(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture, step: str
) -> None:
    store = await make_store()
    await store.redis.hset(store.keys.meta, "t", step)
    await send(store, FIRST)
    worker = make_worker(store, "w1", batch_size=5, error_backoff_s=0.01, damaged_retry_s=0.05)
    with caplog.at_level(logging.ERROR, logger="workers.learner_loop"):
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # several retries
        assert not running.done()  # the worker waits; it did not die
        worker.stop()
        await asyncio.wait_for(running, 10)
    meta = await store.redis.hgetall(store.keys.meta)
    assert (meta[b"t"], meta.get(b"seq", b"0")) == (step.encode(), b"0")
    assert await store.redis.xlen(store.keys.redo) == 0
    assert await store.redis.xlen(store.keys.stream) == 10
    said = [r.getMessage() for r in caplog.records if "refuses every commit" in r.getMessage()]
    assert said == [
        f"model 'default' refuses every commit, nothing written: "
        f"meta field t is not a whole number: {step}"
    ]
    assert not [r for r in caplog.records if r.exc_info]  # no traceback
    # Mended, the model learns every example once, from where it was.
    await store.redis.hset(store.keys.meta, "t", "0")
    await worker.run_until_idle()
    assert worker.damaged == ""
    await assert_equals_replay(store, FIRST)
