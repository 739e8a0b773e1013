"""A model with crosses, fed through the API (the compiled scan path and the general path,
half the rows each) and learned by the real worker, equals the in-process learner on the
hasher's batch (what ``online-ctr replay --crosses`` learns) bit for bit, at batch sizes 1 and
512, with admission, with expiry, with a feature budget and with negative sampling: crosses
are features like any other."""

from __future__ import annotations

import asyncio
import itertools
import json
import warnings
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning import eviction
from online_ctr.learning.eviction import held
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.retention import live
from online_ctr.learning.sampling import keep_negatives
from online_ctr.metrics import Metrics
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.api.scan import scan
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from tests.workers.conftest import scan_state
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 1_200))
CROSSES = "C1&C2,I1&C3,C14&C17"
SPAN = 300
#: Below what one bin of 64 examples brings: the budget evicts crosses and others alike.
MOST = 500


def bodies() -> list[bytes]:
    """The rows as /learn bodies of 100: the first half plain (scanned), the second half
    with an escaped key, which only the general path reads."""
    out = []
    for start in range(0, len(ROWS), 100):
        examples = [{"features": x, "label": y} for x, y in ROWS[start : start + 100]]
        body = json.dumps({"examples": examples}).encode()
        if start >= len(ROWS) // 2:
            body = body.replace(b'"features"', b'"\\u0066eatures"')
            assert scan(body, want_label=True) is None
        else:
            assert scan(body, want_label=True) is not None
        out.append(body)
    return out


def reference(settings: Settings) -> InMemoryModel:
    spec = model_spec(settings)
    model = InMemoryModel(
        spec.rule,
        spec.params,
        admission=spec.admission,
        expire_after=spec.expire_after,
        max_features=spec.max_features,
        budget_bins=(eviction.BIN_EXAMPLES, eviction.WINDOW_BINS),
    )
    hasher = FeatureHasher(numeric=settings.numeric, crosses=spec.crosses)
    batch = hasher.batch([x for x, _ in ROWS], [y for _, y in ROWS])
    # Sampled as the API samples: each example by a hash of its ids, crosses included.
    model.learn(keep_negatives(batch, settings.negative_rate))
    return model


async def learned_state(settings: Settings, batch_size: int) -> tuple[dict[int, Any], Any]:
    """The rows the model holds (those past their span, or evicted, left out: the learner
    deletes them as it sweeps), and its info."""
    redis = aioredis.Redis.from_url(str(settings.redis_url))
    try:
        store = ModelStore(redis, model_spec(settings))
        config = WorkerConfig(name="w1", batch_size=batch_size)
        await Worker(store, config, Metrics(CollectorRegistry())).run_until_idle()
        stored, info = await scan_state(store), await store.info()
        spec = store.spec
        if spec.max_features:
            rows = np.array(list(stored.values()))
            zero = spec.rule.weights(spec.fields_of(rows), rows[:, -1], spec.params) == 0.0
            kept = held(rows[:, -1], zero, (await store.feature_budget()).marks)
            stored = {i: row for (i, row), k in zip(stored.items(), kept, strict=True) if k}
        if spec.expire_after:
            stored = {i: row for i, row in stored.items() if live(row[-1:], info.t, SPAN)[0]}
        return stored, info
    finally:
        await redis.aclose()


@pytest.mark.parametrize(
    "lean",
    [
        {},
        {"admission": "bloom:2"},
        {"expire_after": SPAN},
        {"max_features": MOST},
        {"negative_rate": 0.5},
    ],
)
@pytest.mark.parametrize("batch_size", [1, 512])
def test_the_worker_learns_crosses_as_replay(
    redis_url: str, batch_size: int, lean: dict[str, Any]
) -> None:
    settings = Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, crosses=CROSSES, **lean, **AUTH
    )
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        for body in bodies():
            reply = client.post(
                "/learn", content=body, headers={"content-type": "application/json"}
            )
            assert reply.status_code == 202, reply.text
    stored, info = asyncio.run(learned_state(settings, batch_size))
    model = reference(settings)
    expected = model.snapshot()
    assert info.t == model.t
    if "negative_rate" in lean:  # every click and about half the non-clicks
        assert len(ROWS) * 0.5 < info.t < len(ROWS)
    else:
        assert info.t == len(ROWS)
    if "expire_after" in lean:
        assert model.features_expired() > 0
    if "max_features" in lean:
        assert model.features_evicted() > 0
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    without = FeatureHasher(numeric=settings.numeric).batch([x for x, _ in ROWS])
    crossed = FeatureHasher(numeric=settings.numeric, crosses=model_spec(settings).crosses)
    cross_ids = set(crossed.batch([x for x, _ in ROWS]).ids.tolist()) - set(without.ids.tolist())
    held = cross_ids & stored.keys()
    assert held  # crosses were learned, and with admission or expiry not all are held
    assert (held == cross_ids) == (not lean)
