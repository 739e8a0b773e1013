"""Crosses as a model option: ``crosses`` in PUT /models (a list or the comma-separated text),
OCTR_CROSSES for the service's own model, ``--crosses`` of ``online-ctr models create``;
shown by GET /models/{name}, refused with a message naming what is wrong, explained and
looked up by name and kept by a snapshot (groups: tests/workers/test_group_crosses.py)."""

from __future__ import annotations

import asyncio
import itertools
import warnings
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import feature_id
from online_ctr.learning.readers import read_examples
from online_ctr.metrics import Metrics
from online_ctr.store.keys import RegistryKeys
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from testkit.paths import CRITEO
from tests.service import test_api_weights as weights_test
from tests.service.keys import AUTH, HEADERS
from tests.service.test_models_command import models, ok, refused
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 400))


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, crosses="C1&C2,C14&C17", **AUTH
    )


async def learn_all(settings: Settings) -> None:
    client = aioredis.Redis.from_url(str(settings.redis_url))
    store = ModelStore(client, model_spec(settings))
    await Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry())).run_until_idle()
    await client.aclose()


def test_a_model_is_created_with_crosses_and_shows_them(client: TestClient, plain: Any) -> None:
    assert client.get("/models/default").json()["crosses"] == "C1&C2,C14&C17"
    made = client.put("/models/listed", json={"crosses": ["site&hour", "site&os"]})
    assert made.status_code == 201, made.text
    texted = client.put("/models/texted", json={"crosses": "site&hour, site&os"})
    assert texted.status_code == 201, texted.text
    for name in ("listed", "texted"):
        assert client.get(f"/models/{name}").json()["crosses"] == "site&hour,site&os"
    assert client.put("/models/none", json={}).status_code == 201
    assert client.get("/models/none").json()["crosses"] == ""
    assert b"crosses" not in plain.hget(RegistryKeys().models, "none")
    assert plain.hget("octr:{none}:meta", "crosses") in (b"", None)


@pytest.mark.parametrize(
    ("crosses", "says"),
    [
        ("site", "is not a cross"),
        ("site&hour&os", "is not a cross"),
        ("hour&hour", "crosses a field with itself"),
        (["a&b", "a&b"], "is named twice"),
        ([f"a&b{i}" for i in range(17)], "at most 16"),
        (42, "crosses"),
    ],
)
def test_bad_crosses_are_a_422_naming_them(client: TestClient, crosses: object, says: str) -> None:
    reply = client.put("/models/bad", json={"crosses": crosses})
    assert reply.status_code == 422 and says in reply.text and "crosses" in reply.text, reply.text


def test_a_cross_is_explained_and_looked_up_by_name(client: TestClient, settings: Settings) -> None:
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_all(settings))
    x = ROWS[0][0]
    reply = client.post("/predict", json={"features": x, "explain": True, "explain_top": 100})
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    explained = answer["explanation"]
    name = f"C1={x['C1']}&C2={x['C2']}"
    terms = {term["feature"]: term for term in explained["features"]}
    assert name in terms and f"C14={x['C14']}&C17={x['C17']}" in terms
    total = explained["bias"] + explained["base_rate"]
    total += sum(t["contribution"] for t in explained["features"])
    assert total + explained["rest"] == pytest.approx(answer["logit"], abs=1e-12)
    found = client.get("/models/default/weights", params={"feature": name})
    assert found.status_code == 200, found.text
    assert found.json()["features"][0]["weight"] == terms[name]["weight"] != 0.0


def test_a_snapshot_keeps_the_crosses(client: TestClient, settings: Settings) -> None:
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS[:50]]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_all(settings))
    blob = client.get("/models/default/snapshot")
    assert blob.status_code == 200, blob.text
    assert client.put("/models/copy/snapshot", content=blob.content).status_code == 201
    assert client.get("/models/copy").json()["crosses"] == "C1&C2,C14&C17"
    assert client.put("/models/plain", json={}).status_code == 201
    plain = client.get("/models/plain/snapshot")
    replaced = client.put("/models/default/snapshot?replace=true", content=plain.content)
    assert replaced.status_code == 409, replaced.text
    assert "OCTR_CROSSES= (served: C1&C2,C14&C17)" in replaced.json()["detail"]


def test_the_command_creates_crosses_and_refuses_bad_ones_in_one_line(redis_url: str) -> None:
    ok(models(redis_url, "create", "crossed", "--rule", "ftrl", "--crosses", "site&hour"))
    refused(
        models(redis_url, "create", "bad", "--rule", "ftrl", "--crosses", "site&site"),
        2,
        "--crosses",
        "crosses a field with itself",
    )


def test_the_weights_listing_names_crosses(redis_url: str) -> None:
    """A model that records its feature names records its crosses' names, from both API
    paths: the listing names them, each name hashing to its id."""
    settings = Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, feature_names=True,
        crosses="site&os", **AUTH, **weights_test.FTRL,
    )  # fmt: skip
    examples = weights_test.rows(300)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        weights_test.learn(client, examples[:150])  # the scanned path
        body = [{"features": {**x, "tags": ["t"]}, "label": y} for x, y in examples[150:]]
        assert client.post("/learn", json={"examples": body}).status_code == 202  # general
        weights_test.apply(settings)
        listed = client.get("/models/default/weights?top=100").json()["features"]
    crossed = {f["name"]: f["id"] for f in listed if f["name"] and "&" in f["name"]}
    assert len(crossed) > 10
    assert all(feature_id(name) == i for name, i in crossed.items())
    sent = {f"site={x['site']}&os={x['os']}" for x, _ in examples}
    assert set(crossed) <= sent
