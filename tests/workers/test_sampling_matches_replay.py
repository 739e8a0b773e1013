"""Weighted, negatively sampled feedback through the real app and a real worker: the model in
Redis equals the in-process learner fed the same kept examples with the same weights, bit for
bit, at worker batch sizes 1, 512 and 8,192; the progressive log loss and the learned weight
are the weighted ones, in ``GET /models`` and in the worker's metrics."""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import Batch, FeatureHasher, concat
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.sampling import keep_negatives
from online_ctr.metrics import Metrics
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from tests.workers.conftest import scan_state
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))
RATE = 0.3
REQUEST = 250  # examples per /learn


def weight_of(i: int) -> float | None:
    """Some examples carry a weight of their own, most none."""
    return None if i % 3 else 0.5 + (i % 11) / 4


def requests() -> list[dict[str, Any]]:
    bodies = []
    for start in range(0, len(ROWS), REQUEST):
        examples = []
        for i, (x, y) in enumerate(ROWS[start : start + REQUEST], start):
            example: dict[str, Any] = {"features": x, "label": y}
            if (w := weight_of(i)) is not None:
                example["weight"] = w
            examples.append(example)
        bodies.append({"examples": examples})
    return bodies


def kept_stream(hasher: FeatureHasher) -> Batch:
    """What the service keeps of each request, one after another."""
    parts = []
    for start in range(0, len(ROWS), REQUEST):
        chunk = ROWS[start : start + REQUEST]
        batch = hasher.batch([x for x, _ in chunk], [y for _, y in chunk])
        given = [weight_of(i) for i in range(start, start + len(chunk))]
        weights = np.array([1.0 if w is None else w for w in given])
        parts.append(keep_negatives(replace(batch, weights=weights), RATE))
    return concat(parts)


@pytest.mark.parametrize("batch_size", [1, 512, 8192])
async def test_the_worker_learns_the_kept_examples_as_the_in_process_learner(
    redis_url: str, batch_size: int
) -> None:
    settings = Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, negative_rate=RATE, **AUTH
    )
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        for body in requests():
            assert client.post("/learn", json=body).status_code == 202
        registry = CollectorRegistry()
        redis = aioredis.Redis.from_url(redis_url)
        try:
            store = ModelStore(redis, model_spec(settings))
            config = WorkerConfig(name="w1", batch_size=batch_size)
            await Worker(store, config, Metrics(registry)).run_until_idle()
            stored = await scan_state(store)
        finally:
            await redis.aclose()
        info = client.get("/models/default").json()

    kept = kept_stream(FeatureHasher(numeric=settings.numeric))
    assert 0 < len(kept) < len(ROWS)
    model = InMemoryModel(store.spec.rule, store.spec.params)
    learned = model.learn(kept)
    expected = model.snapshot()
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():  # the same operations in the same order
        np.testing.assert_array_equal(stored[feature], row[:-1])

    weights = kept.example_weights()
    total = math.fsum(weights)
    assert info["global_step"] == len(kept)
    assert info["learned_weight"] == pytest.approx(total, rel=1e-12)
    # Summed in another order (per commit) than here: a few ulps per example at most.
    mean = math.fsum(learned.losses * weights) / total
    assert info["progressive_logloss"] == pytest.approx(mean, rel=1e-12)
    sample = registry.get_sample_value
    assert sample("online_ctr_learned_weight_total", {"model": "default"}) == pytest.approx(
        total, rel=1e-12
    )
    assert sample("online_ctr_progressive_logloss_total", {"model": "default"}) == pytest.approx(
        mean * total, rel=1e-12
    )
