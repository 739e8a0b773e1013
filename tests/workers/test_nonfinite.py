"""Nothing non-finite reaches a model, and no commit is ever half-applied: a model whose meta
holds a value no commit can add to is refused whole (its step never jumps), and an example
whose learning overflows is dead-lettered alone while the rest of its group is learned once."""

from __future__ import annotations

import asyncio
import itertools
import logging

import numpy as np
import pytest

from online_ctr.learning.features import Batch, Example, FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.store import codec
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 40))


async def assert_equals_replay(store: ModelStore, rows: list[tuple[Example, int]]) -> None:
    """The stored model is exactly the in-process replay of ``rows``, one at a time."""
    info = await store.info()
    stored = await scan_state(store)
    model = InMemoryModel(store.spec.rule, store.spec.params)
    replay(rows, model, FeatureHasher(), batch_size=1)
    assert info.t == model.t == len(rows)
    expected = model.snapshot()
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    assert info.nonzero_weights == recount_nonzero(store, stored, info.t)
    assert info.features_tracked == len(stored)
    assert np.isfinite(info.logloss_sum)


async def test_a_meta_whose_log_loss_sum_is_nan_refuses_the_commit_whole(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    # Issue 31's finding: finalize moved seq, added the redo entry and set t before Redis
    # refused HINCRBYFLOAT on 'nan'; each retry applied the group again (step 100 -> 200).
    store = await make_store()
    await store.redis.hset(store.keys.meta, mapping={"t": 0, "logloss_sum": "nan"})
    await send(store, ROWS[:20])
    worker = make_worker(store, "w1", batch_size=5, error_backoff_s=0.01, damaged_retry_s=0.05)
    with caplog.at_level(logging.ERROR, logger="workers.learner_loop"):
        running = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # ten retries at least
        worker.stop()
        await asyncio.wait_for(running, 10)
    meta = await store.redis.hgetall(store.keys.meta)
    assert (meta[b"t"], meta.get(b"seq", b"0"), meta[b"logloss_sum"]) == (b"0", b"0", b"nan")
    assert await store.redis.xlen(store.keys.redo) == 0
    assert await store.redis.xlen(store.keys.stream) == 20
    assert await store.redis.xlen(store.keys.dead) == 0
    said = [r.getMessage() for r in caplog.records if "refuses every commit" in r.getMessage()]
    assert len(said) == 1, said  # one clear line, not one per retry
    assert "'default'" in said[0] and "logloss_sum is not a finite number: nan" in said[0]
    # Mended, the model learns every example once, from where it was.
    await store.redis.hset(store.keys.meta, "logloss_sum", "0")
    await worker.run_until_idle()
    assert worker.damaged == ""
    await assert_equals_replay(store, ROWS[:20])


def overflowing(example: tuple[Example, int]) -> bytes:
    """``example`` encoded with one feature's value 1e300: finite, so an old or corrupt producer
    could send it (``/learn`` refuses only non-finite values), but FTRL's ``n += (g x)^2``
    overflows to inf on it."""
    batch = FeatureHasher().batch([example[0]], [example[1]])
    values = batch.values.copy()
    values[1] = 1e300
    return codec.encode_entry(Batch(batch.indptr, batch.ids, values, batch.labels))


@pytest.mark.parametrize("per_entry", [1, 3])
async def test_an_example_that_overflows_is_dead_lettered_alone(
    make_store: MakeStore, per_entry: int
) -> None:
    store = await make_store("ftrl")
    await send(store, ROWS[:15], per_entry=per_entry)
    poison = await store.redis.xadd(store.keys.stream, {"b": overflowing(ROWS[15])})
    await send(store, ROWS[16:30], per_entry=per_entry)
    worker = make_worker(store, "w1", batch_size=30)  # the first group holds all of them
    await worker.run_until_idle()
    dead = await store.redis.xrange(store.keys.dead)
    assert [fields[b"entry"] for _, fields in dead] == [poison]
    reason = dead[0][1][b"reason"].decode()
    assert reason.startswith("non-finite state for feature 0x") and "after this example" in reason
    assert "deliveries" not in reason  # at once, not after max_deliveries
    info = await store.info()
    assert (info.stream_lag, info.dead_letters) == (0, 1)
    await assert_equals_replay(store, ROWS[:15] + ROWS[16:30])
