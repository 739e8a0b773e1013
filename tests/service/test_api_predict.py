"""POST /predict against a real Redis: shapes, agreement with the in-process model, metrics."""

from __future__ import annotations

import asyncio
import itertools
import json
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import FeatureHasher, Value
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule
from online_ctr.metrics import Metrics
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.api.scan import scan
from testkit.paths import CRITEO
from tests.service.keys import AUTH
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 300))
MIXED: dict[str, Value] = {"site": "news", "price": 2.5, "tags": ["a", "b", "a"], "zero": 0}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, **AUTH)


def predict(client: TestClient, body: dict[str, Any], **params: str) -> Any:
    reply = client.post("/predict", json=body, params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


async def learn_with_worker(settings: Settings) -> None:
    """Apply everything in the stream with the real worker code, then close."""
    redis = aioredis.Redis.from_url(str(settings.redis_url))
    spec = model_spec(settings)
    worker = Worker(ModelStore(redis, spec), WorkerConfig(name="w1"), Metrics(CollectorRegistry()))
    await worker.run_until_idle()
    await redis.aclose()


def test_unknown_features_predict_one_half(client: TestClient) -> None:
    assert predict(client, {"features": MIXED}) == {
        "probability": 0.5,
        "logit": 0.0,
        "model": "default",
        "calibrated": False,
    }


def test_single_and_batch_shapes_agree_in_order(client: TestClient, settings: Settings) -> None:
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_with_worker(settings))
    examples = [x for x, _ in ROWS[:20]]
    batch = predict(client, {"examples": [{"features": x} for x in examples]})
    assert batch["model"] == "default"
    singles = [predict(client, {"features": x}) for x in examples]
    assert batch["predictions"] == [
        {"probability": one["probability"], "logit": one["logit"]} for one in singles
    ]
    assert len({p["probability"] for p in batch["predictions"]}) > 1
    # A repeated list item makes the hasher sort the request's features, which can change
    # the last bits of a sum: equal up to float rounding.
    mixed = predict(client, {"examples": [{"features": x} for x in [*examples, MIXED]]})
    expected = [one["logit"] for one in singles] + [predict(client, {"features": MIXED})["logit"]]
    np.testing.assert_allclose([p["logit"] for p in mixed["predictions"]], expected, rtol=1e-12)


def test_predictions_equal_the_in_process_model(client: TestClient, settings: Settings) -> None:
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).json() == {"accepted": len(ROWS)}
    asyncio.run(learn_with_worker(settings))
    hasher = FeatureHasher(numeric=settings.numeric)
    # The worker learns example by example, exactly as the in-process model.
    reference = InMemoryModel(get_rule(settings.rule), settings.rule_params())
    reference.learn(hasher.batch([x for x, _ in ROWS], [y for _, y in ROWS]))
    examples = [x for x, _ in ROWS[:50]] + [MIXED]
    expected = reference.predict(hasher.batch(examples))
    got = predict(client, {"examples": [{"features": x} for x in examples]})["predictions"]
    np.testing.assert_allclose([p["probability"] for p in got], expected, rtol=1e-12)
    logits = np.array([p["logit"] for p in got])
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), expected, rtol=1e-12)


def test_concurrent_requests_get_the_answers_they_get_alone(
    client: TestClient, settings: Settings
) -> None:
    """Concurrent requests share scoring passes; each still gets exactly its own answer."""
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_with_worker(settings))
    bodies = [{"features": x} for x, _ in ROWS[:40]] + [
        {"examples": [{"features": x} for x, _ in ROWS[i : i + 7]] + [{"features": MIXED}]}
        for i in range(0, 40, 8)
    ]
    alone = [predict(client, body) for body in bodies]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda body: predict(client, body), bodies * 3))
    assert together == alone * 3


def test_model_parameter_defaults_to_the_served_model(client: TestClient) -> None:
    body = {"features": {"site": "news"}}
    assert predict(client, body, model="default") == predict(client, body)


def test_other_models_are_404_with_a_message(client: TestClient) -> None:
    reply = client.post("/predict", json={"features": {"a": "b"}}, params={"model": "other"})
    assert reply.status_code == 404
    assert reply.json() == {"detail": "no model or group 'other' (GET /models lists them)"}


def test_metrics_count_examples_latency_and_requests(
    client: TestClient, registry: CollectorRegistry
) -> None:
    predict(client, {"features": MIXED})
    predict(client, {"examples": [{"features": MIXED}, {"features": {"x": "y"}}]})
    client.post("/predict", json={"features": {}})
    model = {"model": "default"}
    assert registry.get_sample_value("online_ctr_predictions_total", model) == 3
    assert registry.get_sample_value("online_ctr_predict_latency_seconds_count", model) == 2
    requests = "online_ctr_http_requests_total"
    ok = {"method": "POST", "route": "/predict", "status_class": "2xx"}
    bad = {**ok, "status_class": "4xx"}
    assert registry.get_sample_value(requests, ok) == 2
    assert registry.get_sample_value(requests, bad) == 1


def test_scanned_and_validated_bodies_get_the_same_answers(
    client: TestClient, settings: Settings
) -> None:
    """A plain batch body is read by service.api.scan; the same JSON with an escape in it
    goes through validation: the answers are the same, bit for bit."""
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_with_worker(settings))
    plain = json.dumps({"examples": [{"features": x} for x, _ in ROWS[:100]]}).encode()
    escaped = plain.replace(b'"features"', b'"\\u0066eatures"')
    assert scan(plain, want_label=False) is not None and scan(escaped, False) is None
    answers = [
        client.post("/predict", content=b, headers={"content-type": "application/json"})
        for b in (plain, escaped)
    ]
    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json()
    assert len({p["probability"] for p in answers[0].json()["predictions"]}) > 1


def test_scanned_and_validated_single_examples_get_the_same_answers(
    client: TestClient, settings: Settings
) -> None:
    """A plain single-example body is read by service.api.scan and answered in the single
    shape; with an escape in it, it goes through validation: bit for bit the same answer."""
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_with_worker(settings))
    for features, _ in ROWS[:20]:
        plain = json.dumps({"features": features}).encode()
        escaped = plain.replace(b'"features"', b'"\\u0066eatures"')
        found = scan(plain, want_label=False)
        assert found is not None and found.single and scan(escaped, False) is None
        answers = [
            client.post("/predict", content=b, headers={"content-type": "application/json"})
            for b in (plain, escaped)
        ]
        assert [a.status_code for a in answers] == [200, 200]
        assert answers[0].json() == answers[1].json()
        assert set(answers[0].json()) == {"probability", "logit", "model", "calibrated"}
        assert answers[0].json()["logit"] != 0.0
