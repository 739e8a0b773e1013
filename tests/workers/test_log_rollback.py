"""A log side that goes back (a failover to a lagging replica) never makes the shards drop
later commits (issue 37, item 2), and is never silent.

A single Redis simulates the failover: the model's log-side keys (meta, stream, redo log,
lease, ...) are written back from a DUMP taken earlier, while the state shards keep the
newer commits they applied, as the state masters of a cluster would.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.store.shards import parse_stamp
from online_ctr.store.stamps import positions
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, scan_state, send
from workers.learner_loop import Worker

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 900))
#: Learned before the replica stopped following, learned only on the lost side, sent after.
BEFORE, LOST, AFTER = ROWS[:300], ROWS[300:600], ROWS[600:]

LogSide = dict[str, tuple[bytes | None, int]]


async def dump_log_side(store: ModelStore) -> LogSide:
    """The log side as a replica that stops following now would keep it."""
    saved: LogSide = {}
    for key in store.keys.log_side():
        saved[key] = (await store.redis.dump(key), await store.redis.pttl(key))
    return saved


async def restore_log_side(store: ModelStore, saved: LogSide) -> None:
    """The failover: the log side is the replica's again; the shards keep what they have."""
    for key, (dumped, ttl) in saved.items():
        if dumped is None:
            await store.redis.delete(key)
        else:
            await store.redis.restore(key, max(ttl, 0), dumped, replace=True)


async def rolled_back(
    store: ModelStore, worker: Worker, before_failover: Callable[[], Awaitable[Any]] | None = None
) -> dict[int, np.ndarray]:
    """Learn BEFORE, then LOST after the replica stopped following; fail over (after
    ``before_failover``); return the state the shards hold then."""
    await send(store, BEFORE)
    await worker.run_until_idle()
    saved = await dump_log_side(store)
    await send(store, LOST)
    await worker.run_until_idle()
    held = await scan_state(store)
    if before_failover is not None:
        await before_failover()
    await restore_log_side(store, saved)
    return held


def learned_on_top(store: ModelStore, held: dict[int, np.ndarray], t: int) -> InMemoryModel:
    """The replay of AFTER, one example at a time, from the state the shards held at step t
    (what the log says was learned before)."""
    model = InMemoryModel(store.spec.rule, store.spec.params)
    ids = np.array(list(held), np.uint64)
    rows = model.table.rows(ids, create=True)
    model.table.data[rows, :-1] = np.array(list(held.values()))
    model.t = t
    # The base rate's counts roll back with the log side's meta: those of BEFORE.
    labels = [float(label) for _, label in BEFORE]
    model.base = model.base_rate.after(model.base_rate.start(), labels, [1.0] * len(labels))
    replay(AFTER, model, FeatureHasher(), batch_size=1)
    return model


def rollbacks(worker: Worker) -> Any:
    return worker.metrics.registry.get_sample_value(
        "online_ctr_log_rollbacks_total", {"model": worker.store.spec.name}
    )


@pytest.mark.parametrize("learner", ["same", "standby"])
async def test_commits_after_a_rollback_reach_the_shards(
    make_store: MakeStore, learner: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await make_store(buckets=256, shards=8)
    first = make_worker(store, "w1", batch_size=50)
    held = await rolled_back(store, first)
    log = await positions(store)
    assert (log.seq, log.gen) == (6, 0)  # 300 examples in groups of 50: 12 commits, back to 6
    assert max(seq for seq, _ in log.shards) == 12
    worker = first
    if learner == "standby":  # the first learner died with the master: its lease expires
        await store.redis.delete(store.keys.lease)
        worker = make_worker(store, "w2", batch_size=50)

    await send(store, AFTER)
    with caplog.at_level(logging.INFO):
        await worker.run_until_idle()

    # Every commit learned after the failover is in the shards: the state is the replay of
    # AFTER on top of what the shards held, bit for bit, at the step the log says.
    info = await store.info()
    assert info.t == len(BEFORE) + len(AFTER)
    expected = learned_on_top(store, held, len(BEFORE)).snapshot()
    stored = await scan_state(store)
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    assert info.stream_lag == 0

    # Said once, in one line, counted, and recorded for /readyz.
    said = [r for r in caplog.records if "the log side went back" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.ERROR
    message = said[0].getMessage()
    assert "ends at commit 6 (generation 0)" in message and "up to 12" in message, message
    assert "generation 1" in message
    assert rollbacks(worker) == 1
    report = await store.redis.hget(store.keys.meta, "rollback")
    assert report is not None and report.decode() == message
    # Every shard is of the new generation, at the log's last commit.
    now = await positions(store)
    assert now.gen == 1 and {gen for _, gen in now.shards} == {1}
    assert max(seq for seq, _ in now.shards) == now.seq == 12

    # The next takeover finds nothing more to say.
    caplog.clear()
    await store.redis.delete(store.keys.lease)
    await send(store, ROWS[:20])
    later = make_worker(store, "w3", batch_size=50)
    await later.run_until_idle()
    assert not [r for r in caplog.records if "went back" in r.getMessage()]
    assert rollbacks(later) == 0


async def test_a_takeover_without_rollback_keeps_plain_stamps(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = await make_store(buckets=256, shards=8)
    await send(store, BEFORE)
    first = make_worker(store, "w1", batch_size=50)
    await first.run_until_idle()
    await store.redis.delete(store.keys.lease)
    await send(store, LOST)
    second = make_worker(store, "w2", batch_size=50)
    with caplog.at_level(logging.INFO):
        await second.run_until_idle()
    assert not [r for r in caplog.records if "went back" in r.getMessage()]
    assert rollbacks(second) == 0
    stamps = [await store.redis.get(store.keys.shard(i).applied) for i in range(store.spec.shards)]
    assert all(raw is None or raw.isdigit() for raw in stamps), stamps
    assert max(parse_stamp(raw)[0] for raw in stamps) == 12
    assert await store.redis.hget(store.keys.meta, "gen") is None


async def test_a_generation_moved_but_not_stamped_is_finished_silently(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A learner that moved the generation and died before restamping every shard: the next
    one restamps the rest at the log's commit, and says nothing more."""
    store = await make_store(buckets=256, shards=8)
    first = make_worker(store, "w1", batch_size=50)
    held = await rolled_back(store, first)
    # As generation.lua leaves it, with no shard restamped yet.
    await store.redis.hset(store.keys.meta, mapping={"gen": "1", "rollback": "earlier"})
    await store.redis.delete(store.keys.lease)
    await send(store, AFTER)
    worker = make_worker(store, "w2", batch_size=50)
    with caplog.at_level(logging.INFO):
        await worker.run_until_idle()
    assert not [r for r in caplog.records if "went back" in r.getMessage()]
    assert rollbacks(worker) == 0
    expected = learned_on_top(store, held, len(BEFORE)).snapshot()
    stored = await scan_state(store)
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    now = await positions(store)
    assert {gen for _, gen in now.shards} == {1}


async def test_a_serving_copy_starts_again_after_a_rollback(make_store: MakeStore) -> None:
    """The API's copy of hot features (single Redis) was exact as of commit 12 before the
    failover; the new generation's commits 7-12 reuse its numbers: it starts again rather
    than take them for the ones it has."""
    store = await make_store(buckets=256, shards=8)
    serving = ModelStore(store.redis, store.spec, replica_features=100_000)
    assert serving.replica is not None
    worker = make_worker(store, "w1", batch_size=50)
    features: list[np.ndarray] = []

    async def warm() -> None:
        features.append(np.array(sorted(await scan_state(store)), np.uint64))
        await serving.replica.read(features[0])  # type: ignore[union-attr]

    await rolled_back(store, worker, warm)
    await send(store, AFTER)
    await worker.run_until_idle()
    assert (await positions(store)).seq == 12  # the numbers the copy had seen, again
    fresh = await serving.replica.read(features[0])
    stored = await store.shards.read(features[0])
    assert fresh is not None and fresh.t == stored.t == len(BEFORE) + len(AFTER)
    np.testing.assert_array_equal(fresh.state, stored.state)
