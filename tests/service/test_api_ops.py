"""GET /models/{name}, /healthz, /readyz, /metrics and the OpenAPI document."""

from __future__ import annotations

import asyncio
import itertools
import re
import warnings

import numpy as np
import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from online_ctr.config.settings import Settings
from online_ctr.learning.features import Example, FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule
from online_ctr.learning.stream_metrics import decayed_sums
from online_ctr.metrics import Metrics
from online_ctr.store.keys import ModelKeys
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from testkit.paths import CRITEO
from tests.service.keys import AUTH
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 200))


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, rule="rda", l1=0.001, **AUTH)


def step_labels(rows: list[tuple[Example, int]]) -> np.ndarray:
    """The labels of ``rows`` as the learner takes them."""
    return np.array([float(y) for _, y in rows])


def store_of(settings: Settings, client: aioredis.Redis) -> ModelStore:
    spec = model_spec(settings)
    return ModelStore(client, spec)


async def in_redis(settings: Settings, work: str) -> None:
    """Run the real worker until the stream is empty, or send one heartbeat."""
    client = aioredis.Redis.from_url(str(settings.redis_url))
    store = store_of(settings, client)
    if work == "learn":
        worker = Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry()))
        await worker.run_until_idle()
    else:
        await store.heartbeat("w1")
    await client.aclose()


def test_model_info_before_and_after_learning(client: TestClient, settings: Settings) -> None:
    info = client.get("/models/default").json()
    params = vars(settings.rule_params())
    assert info == {
        "name": "default",
        "rule": "rda",
        "params": params,
        "hash_bits": 64,
        "global_step": 0,
        "nonzero_weights": 0,
        "features_tracked": 0,
        "progressive_logloss": None,
        "stream_lag": 0,
        "dead_letters": 0,
        "numeric": "log_bucket",
        "calibration": "off",
        "group": None,
        "admission": "all",
        "negative_rate": 1.0,
        "learned_weight": 0.0,
        "expire_after": 0,
        "features_expired": 0,
        "max_features": 0,
        "features_evicted": 0,
        "features_held": 0,
        "features_pending_admission": None,  # admission all: no counting filter
        "base_rate": "mean",
        "base_rate_logit": 0.0,  # nothing learned: (0 + 1/2) / (0 + 1)
        "click_rate": None,
        "calibration_ratio": None,
        "recent_calibration_ratio": None,
        "crosses": "",
        "state_bytes": info["state_bytes"],  # the filters only: below
    }
    empty_bytes = info["state_bytes"]
    assert empty_bytes > 0
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    client.post("/learn", json=body)
    assert client.get("/models/default").json()["stream_lag"] == 1
    asyncio.run(in_redis(settings, "learn"))

    # The worker learns example by example, exactly as the in-process model.
    reference = InMemoryModel(get_rule("rda"), settings.rule_params())
    step = reference.learn(FeatureHasher().batch([x for x, _ in ROWS], [y for _, y in ROWS]))
    info = client.get("/models/default").json()
    assert info["global_step"] == len(ROWS) == info["learned_weight"]
    assert info["features_tracked"] == reference.features_tracked()
    assert info["nonzero_weights"] == reference.nonzero_weights() > 0
    np.testing.assert_allclose(info["progressive_logloss"], step.losses.mean(), rtol=1e-12)
    assert (info["stream_lag"], info["dead_letters"]) == (0, 0)
    # The prior the worker committed is the in-process model's, bit for bit; the calibration
    # is the progressive predictions' sum over the clicks (Redis adds the groups' sums).
    assert info["base_rate_logit"] == reference.base_rate.logit(reference.base) != 0.0
    clicks = sum(y for _, y in ROWS)
    assert info["click_rate"] == clicks / len(ROWS)
    expected = step.probabilities.sum() / clicks
    np.testing.assert_allclose(info["calibration_ratio"], expected, rtol=1e-12)
    recent = decayed_sums(np.zeros(2), step.probabilities, step_labels(ROWS))
    np.testing.assert_allclose(info["recent_calibration_ratio"], recent[0] / recent[1], rtol=1e-12)
    # The features learned take memory beside the filters (online_ctr.store.state_bytes).
    assert info["state_bytes"] > empty_bytes
    metrics = client.get("/metrics").text
    assert f'online_ctr_state_bytes{{model="default"}} {float(info["state_bytes"])}' in metrics


def test_other_models_are_404(client: TestClient) -> None:
    reply = client.get("/models/other")
    assert reply.status_code == 404
    assert reply.json()["detail"] == "no model or group 'other' (GET /models lists them)"


def test_an_impossible_model_name_is_422(client: TestClient) -> None:
    reply = client.get("/models/no such model!")
    assert reply.status_code == 422
    assert reply.json()["errors"][0]["field"] == "name"


def test_healthz(client: TestClient) -> None:
    reply = client.get("/healthz")
    assert (reply.status_code, reply.json()) == (200, {"status": "ok"})


def test_readyz_needs_a_recent_worker_heartbeat(client: TestClient, settings: Settings) -> None:
    reply = client.get("/readyz")
    assert reply.status_code == 503
    assert reply.headers["Retry-After"] == "1"
    assert reply.json() == {"detail": "no worker has sent a heartbeat for model 'default' yet"}

    asyncio.run(in_redis(settings, "heartbeat"))
    reply = client.get("/readyz")
    assert reply.status_code == 200
    assert reply.json()["ready"] is True
    assert 0 <= reply.json()["heartbeat_age_s"] < settings.ready_max_heartbeat_age_s

    sync = redis.Redis.from_url(str(settings.redis_url))
    seconds, _ = sync.time()
    sync.zadd(ModelKeys("default").workers, {"w1": seconds - 100})
    sync.close()
    reply = client.get("/readyz")
    assert reply.status_code == 503
    detail = reply.json()["detail"]
    assert re.fullmatch(
        r"the newest worker heartbeat for model 'default' is 10\d\.\ds old \(limit 15s\): "
        r"are the workers running\?",
        detail,
    ), detail


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_refreshes_the_model_gauges(client: TestClient, settings: Settings) -> None:
    client.post("/learn", json={"examples": [{"features": x, "label": y} for x, y in ROWS]})
    client.post("/learn", json={"features": ROWS[0][0], "label": 1})
    model = (("model", "default"),)
    reply = client.get("/metrics")
    assert reply.headers["content-type"].startswith("text/plain")
    assert samples(reply.text)[("online_ctr_stream_lag_entries", model)] == 2

    asyncio.run(in_redis(settings, "learn"))
    info = client.get("/models/default").json()
    values = samples(client.get("/metrics").text)
    assert values[("online_ctr_stream_lag_entries", model)] == 0
    assert values[("online_ctr_nonzero_weights", model)] == info["nonzero_weights"] > 0
    assert values[("online_ctr_features_tracked", model)] == info["features_tracked"]


def test_every_answer_is_counted_by_route_template(
    client: TestClient, registry: CollectorRegistry
) -> None:
    client.get("/models/default")
    client.get("/models/zzz")
    client.get("/models/yyy")
    client.get("/no/such/path")
    client.post("/predict", content=b"{}", headers={"content-type": "text/plain"})
    client.get("/readyz")

    def count(method: str, route: str, status_class: str) -> float | None:
        labels = {"method": method, "route": route, "status_class": status_class}
        return registry.get_sample_value("online_ctr_http_requests_total", labels)

    assert count("GET", "/models/{name}", "2xx") == 1
    assert count("GET", "/models/{name}", "4xx") == 2
    assert count("GET", "unmatched", "4xx") == 1
    assert count("POST", "/predict", "4xx") == 1
    assert count("GET", "/readyz", "5xx") == 1


def test_openapi_documents_the_endpoints_with_examples(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    paths = document["paths"]
    assert {"/predict", "/learn", "/models/{name}", "/healthz", "/readyz", "/metrics"} <= set(paths)
    for path, parameters, shapes in (
        ("/predict", ["model"], 2),
        ("/learn", ["model", "Idempotency-Key"], 4),
    ):
        operation = paths[path]["post"]
        assert [p["name"] for p in operation["parameters"]] == parameters
        assert {"401", "403", "404", "413", "415", "422", "503"} <= set(operation["responses"])
        assert operation["security"] == [{"bearer": []}, {"apiKey": []}]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        # Exactly one of `features` and `examples`; /learn also of labels by `prediction_id`.
        assert len(body["oneOf"]) == shapes
    assert "409" in paths["/learn"]["post"]["responses"]
    assert (
        "may still have been accepted" in paths["/learn"]["post"]["responses"]["503"]["description"]
    )
    assert "security" not in paths["/healthz"]["get"]
    schemas = document["components"]["schemas"]
    assert set(document["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    assert schemas["PredictBatch"]["examples"][0]["examples"][1]["features"]["site"]
    assert schemas["LearnExample"]["examples"][0]["label"] == 1
    for shape in ("PredictExample", "PredictBatch", "LearnExample", "LearnBatch"):
        assert schemas[shape]["additionalProperties"] is False
    assert client.get("/docs").status_code == 200


def test_delete_removes_every_key_and_the_model_starts_again_empty(
    client: TestClient, settings: Settings
) -> None:
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(in_redis(settings, "learn"))
    plain = redis.Redis.from_url(str(settings.redis_url))
    assert plain.keys("octr:{default/*}:b:*"), "the model has state to delete"

    reply = client.delete("/models/default")
    assert reply.status_code == 200 and reply.json()["name"] == "default"
    assert reply.json()["keys_deleted"] > len(ROWS) // 10
    # The own model is made again at once: its shards hold nothing but its empty filters.
    filters = {f"octr:{{default/{shard}}}:filter".encode() for shard in range(64)}
    assert settings.state_shards == 64 and set(plain.keys("octr:{default/*}:*")) == filters
    assert not any((plain.get(key) or b"").strip(b"\0") for key in filters)
    info = client.get("/models/default").json()
    assert (info["global_step"], info["features_tracked"], info["stream_lag"]) == (0, 0, 0)
    assert client.delete("/models/another").status_code == 404

    assert client.post("/learn", json={"examples": body["examples"][:10]}).status_code == 202
    asyncio.run(in_redis(settings, "learn"))
    assert client.get("/models/default").json()["global_step"] == 10
    plain.close()


def test_a_method_not_allowed_lists_every_method_of_the_path(client: TestClient) -> None:
    reply = client.post("/models/default")
    assert reply.status_code == 405
    assert reply.headers["allow"] == "DELETE, GET, PUT"
