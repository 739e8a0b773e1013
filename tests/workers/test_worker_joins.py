"""The learner closes due join windows itself: before each step of ``run_until_idle`` (and
every ~100 ms in its loop), unlabelled impressions become negatives, or are dropped."""

from __future__ import annotations

import itertools
import math

import pytest
from prometheus_client import CollectorRegistry

from online_ctr.config.join_policy import JoinPolicy
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.readers import read_examples
from online_ctr.metrics import Metrics
from online_ctr.store import codec
from online_ctr.store.impressions import Impressions, PassLog
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.anyio

ROWS = [x for x, _ in itertools.islice(read_examples(CRITEO, "criteo"), 20)]


async def log_rows(store: ModelStore, policy: JoinPolicy) -> list[str]:
    """Log the rows as served impressions (p = 0.25 each) and close their windows."""
    keys = store.keys
    impressions = Impressions(store.redis, keys.feedback, [keys.stream], policy)
    ids = [f"imp-{j}" for j in range(len(ROWS))]
    entries = codec.encode_rows(FeatureHasher(numeric=store.spec.numeric).batch(ROWS))
    logged = await impressions.log(ids, entries, [0.25] * len(ROWS), "default", [len(ROWS)], 100)
    assert logged == PassLog([], [])
    await store.redis.zadd(keys.feedback.pending, dict.fromkeys(ids, 0), xx=True)
    return ids


@pytest.mark.parametrize(("unlabeled", "learned"), [("negative", 20), ("drop", 0)])
async def test_run_until_idle_closes_due_windows(
    make_store: MakeStore, unlabeled: str, learned: int
) -> None:
    store = await make_store()
    policy = JoinPolicy(600, "negative" if unlabeled == "negative" else "drop")
    ids = await log_rows(store, policy)
    registry = CollectorRegistry()
    worker = Worker(store, WorkerConfig(name="w1"), Metrics(registry), policy=policy)
    await worker.run_until_idle()
    info = await store.info()
    assert info.t == learned and info.stream_lag == 0
    if learned:  # every served p was 0.25 and every label 0: the loss is the served one's
        assert info.logloss_sum == pytest.approx(-20 * math.log(0.75), rel=1e-12)
    state = "negative" if learned else "dropped"
    assert await store.redis.hget(store.keys.feedback.impression(ids[0]), "s") == state.encode()
    action = "negative" if learned else "dropped"
    counted = registry.get_sample_value(
        "online_ctr_unlabeled_impressions_total", {"model": "default", "action": action}
    )
    assert counted == 20


async def test_a_worker_without_joins_sweeps_nothing(make_store: MakeStore) -> None:
    store = await make_store()
    await log_rows(store, JoinPolicy(600))
    worker = Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry()))
    await worker.run_until_idle()
    assert (await store.info()).t == 0
    assert await store.redis.zcard(store.keys.feedback.pending) == 20


def test_one_example_entries_are_encode_entry_of_each_row() -> None:
    hasher = FeatureHasher()
    rows = [*ROWS[:5], {"n": 2.5, "s": "x"}, {"tags": ["a", "b"]}]
    batch = hasher.batch(rows)
    expected = [codec.encode_entry(hasher.batch([row], [0])) for row in rows]
    assert codec.encode_rows(batch) == expected
