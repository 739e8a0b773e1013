"""OCTR_CALIBRATION=power through the real app and worker: the served probability is the
stored fit applied to the model's, the response says so, and the fit is the one the
in-process model reaches on the same stream."""

from __future__ import annotations

import asyncio
import warnings

import numpy as np
import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.calibration import PowerFit
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import sigmoid
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import get_rule
from online_ctr.metrics import Metrics
from online_ctr.store.calibration_codec import FIT_FIELD, HISTOGRAM_FIELD, decode_fit
from online_ctr.store.keys import ModelKeys
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from tests.service.keys import AUTH, HEADERS
from tests.service.test_api_predict import ROWS, predict
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, calibration="power", **AUTH)


async def learn_in_two_commits(client: TestClient, settings: Settings) -> None:
    """ROWS through /learn, learned by one real worker in two commits (the fit is refitted
    at each, the second from the histogram the first stored)."""
    client_redis = aioredis.Redis.from_url(str(settings.redis_url))
    store = ModelStore(client_redis, model_spec(settings))
    worker = Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry()))
    for start in (0, 150):
        rows = ROWS[start : start + 150]
        body = {"examples": [{"features": x, "label": y} for x, y in rows]}
        assert client.post("/learn", json=body).status_code == 202
        assert await worker.run_until_idle() == 1
    await client_redis.aclose()


def test_predictions_are_calibrated_with_the_fit_the_learner_stored(
    client: TestClient, settings: Settings
) -> None:
    plain = redis.Redis.from_url(str(settings.redis_url))
    meta = ModelKeys("default").meta
    before = predict(client, {"features": {"site": "news"}})
    # Before the first commit the fit is the identity, and it says it is calibrated.
    assert before == {"probability": 0.5, "logit": 0.0, "model": "default", "calibrated": True}

    asyncio.run(learn_in_two_commits(client, settings))
    assert plain.hget(meta, "t") == b"300"
    fit = decode_fit(plain.hget(meta, FIT_FIELD))
    assert fit != PowerFit()

    # The in-process model on the same stream reaches the same histogram and fit, bit for bit.
    model = InMemoryModel(get_rule("ftrl"), settings.rule_params(), calibration="power")
    hasher = FeatureHasher(numeric=settings.numeric)
    model.learn(hasher.batch([x for x, _ in ROWS], [y for _, y in ROWS]))
    assert model.calibration is not None
    assert plain.hget(meta, HISTOGRAM_FIELD) == model.calibration.histogram.sums.tobytes()
    assert fit == model.calibration.fit

    examples = [x for x, _ in ROWS[:30]]
    got = predict(client, {"examples": [{"features": x} for x in examples]})
    assert got["calibrated"] is True
    logits = np.array([p["logit"] for p in got["predictions"]])
    served = np.array([p["probability"] for p in got["predictions"]])
    np.testing.assert_array_equal(served, fit.apply(sigmoid(logits)))
    # The logit stays the model's: uncalibrated, as the in-process model predicts it.
    np.testing.assert_allclose(sigmoid(logits), model.predict(hasher.batch(examples)), rtol=1e-12)
    assert not np.allclose(served, sigmoid(logits))
    # The model's description reads past the histogram's bytes in the same hash.
    info = client.get("/models/default").json()
    assert (info["calibration"], info["numeric"], info["global_step"]) == (
        "power",
        "log_bucket",
        300,
    )
    plain.close()


def test_without_calibration_the_response_says_so(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        reply = predict(client, {"examples": [{"features": {"a": "b"}}]})
    assert reply["calibrated"] is False
    plain = redis.Redis.from_url(redis_url)
    assert plain.hget(ModelKeys("default").meta, "calibration") == b"off"
    plain.close()
