"""The worker's Prometheus metrics carry the values the model in Redis has."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest
from redis.exceptions import ConnectionError

from online_ctr.learning.features import Example, FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import RULES
from online_ctr.learning.stream_metrics import auc
from online_ctr.store.commits import Commit
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send
from workers.learner_loop import Worker

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 600))


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_worker_metrics_match_the_model(make_store: MakeStore, rule: str) -> None:
    store = await make_store(rule)
    await send(store, ROWS, per_entry=2)
    worker = make_worker(store, batch_size=50)
    batches = await worker.run_until_idle()
    info = await store.info()
    recount = recount_nonzero(store, await scan_state(store), info.t)

    def sample(name: str) -> float | None:
        return worker.metrics.registry.get_sample_value(name, {"model": "default"})

    assert batches == 12
    assert sample("online_ctr_learned_examples_total") == len(ROWS) == info.t
    # The counter adds per-batch float sums; Redis adds the same sums in long double.
    assert sample("online_ctr_progressive_logloss_total") == pytest.approx(
        info.logloss_sum, rel=1e-12
    )
    assert sample("online_ctr_nonzero_weights") == info.nonzero_weights == recount
    assert sample("online_ctr_features_tracked") == info.features_tracked
    assert sample("online_ctr_learn_batch_seconds_count") == batches
    assert sample("online_ctr_stream_lag_entries") is not None
    # Calibration: the predicted clicks and the clicks, as GET /models adds them up; the
    # prior's offset, the in-process model's after the same rows.
    predicted, labels = replayed(ROWS, store)
    assert sample("online_ctr_clicks_total") == labels.sum() == info.label_sum
    assert sample("online_ctr_predicted_clicks_total") == pytest.approx(predicted.sum(), rel=1e-12)
    assert info.predicted_sum == pytest.approx(predicted.sum(), rel=1e-12)
    model = InMemoryModel(store.spec.rule, store.spec.params)
    model.base = model.base_rate.after(model.base, labels.tolist(), [1.0] * len(labels))
    assert sample("online_ctr_base_rate_logit") == model.base_rate.logit(model.base) < 0


def replayed(rows: list[tuple[Example, int]], store: ModelStore) -> tuple[np.ndarray, np.ndarray]:
    """The in-process replay's progressive predictions of ``rows``, and their labels."""
    model = InMemoryModel(store.spec.rule, store.spec.params)
    batches: list[np.ndarray] = []
    replay(
        rows,
        model,
        FeatureHasher(),
        batch_size=1,
        on_batch=lambda b: batches.append(b.probabilities),
    )
    return np.concatenate(batches), np.array([label for _, label in rows], dtype=np.float64)


def auc_sample(worker: Worker) -> float | None:
    return worker.metrics.registry.get_sample_value(
        "online_ctr_progressive_auc", {"model": "default"}
    )


@pytest.mark.parametrize(("window", "batch_size"), [(250, 50), (251, 1), (10_000, 64)])
async def test_auc_gauge_is_the_exact_auc_of_the_last_w_replayed_predictions(
    make_store: MakeStore, window: int, batch_size: int
) -> None:
    store = await make_store("ftrl")
    await send(store, ROWS, per_entry=2)
    worker = make_worker(store, batch_size=batch_size, auc_window=window)
    await worker.run_until_idle()
    p, y = replayed(ROWS, store)

    # The worker predicts bit for bit what the replay predicts: the AUC is the same float.
    assert auc_sample(worker) == auc(p[-window:], y[-window:])
    assert len(worker.auc.window) == min(window, len(ROWS))


async def test_auc_gauge_is_absent_until_both_labels_are_seen(make_store: MakeStore) -> None:
    store = await make_store("ftrl")
    negatives = [(x, y) for x, y in ROWS if y == 0][:100]
    await send(store, negatives)
    worker = make_worker(store, batch_size=10)
    await worker.run_until_idle()
    assert auc_sample(worker) is None  # not NaN, not 0: no series at all

    positives = [(x, y) for x, y in ROWS if y == 1][:3]
    await send(store, positives)
    await worker.run_until_idle()
    p, y = replayed(negatives + positives, store)
    assert auc_sample(worker) == auc(p, y)


async def test_losing_the_lease_forgets_the_window_and_the_series(make_store: MakeStore) -> None:
    store = await make_store("ftrl")
    await send(store, ROWS[:300])
    first = make_worker(store, name="w1", batch_size=50)
    await first.run_until_idle()
    assert auc_sample(first) is not None

    # Another worker takes over: its window starts with the rows it learns.
    await store.redis.delete(store.keys.lease)
    second = make_worker(store, name="w2", batch_size=50)
    await send(store, ROWS[300:450])
    await second.run_until_idle()
    p, y = replayed(ROWS[:450], store)
    assert auc_sample(second) == auc(p[300:], y[300:])

    # The first one learns a group it cannot commit (fenced): its window is not the model's.
    await send(store, ROWS[450:])
    await first.run_until_idle()
    assert first.metrics.registry.get_sample_value(
        "online_ctr_commit_conflicts_total", {"model": "default"}
    )
    assert auc_sample(first) is None
    assert len(first.auc.window) == 0


async def test_a_commit_whose_answer_was_lost_is_counted_once(make_store: MakeStore) -> None:
    """Redis runs a finalize and then goes away before its answer reaches the learner (as in
    a restart): the learner finds its group committed when it recovers, and counts it."""
    store = await make_store()
    await send(store, ROWS[:300])
    worker = make_worker(store, batch_size=100, error_backoff_s=0.01)
    finalize = store.log.finalize

    async def answer_lost(*args: Any) -> Commit:
        store.log.finalize = finalize  # type: ignore[method-assign]  # the first one only
        await finalize(*args)
        raise ConnectionError("Connection closed by server.")

    store.log.finalize = answer_lost  # type: ignore[method-assign]
    running = asyncio.create_task(worker.run())
    while (await store.info()).t < len(ROWS[:300]) or store.log.finalize is not finalize:
        await asyncio.sleep(0.005)
    worker.stop()
    await asyncio.wait_for(running, 10)
    info = await store.info()

    def sample(name: str) -> float | None:
        return worker.metrics.registry.get_sample_value(name, {"model": "default"})

    assert info.t == sample("online_ctr_learned_examples_total") == 300
    assert sample("online_ctr_progressive_logloss_total") == pytest.approx(
        info.logloss_sum, rel=1e-12
    )
