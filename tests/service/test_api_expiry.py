"""Feature expiry as a model setting: ``expire_after`` in PUT /models, OCTR_EXPIRE_AFTER for
the service's own model, shown by GET /models/{name} with the features expired so far, and
refused with a message where it cannot work."""

from __future__ import annotations

import asyncio
import itertools
import warnings
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from online_ctr.config.settings import Settings
from online_ctr.learning.readers import read_examples
from online_ctr.metrics import Metrics
from online_ctr.store.keys import RegistryKeys
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 600))
SPAN = 100


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, expire_after=SPAN, **AUTH
    )


async def learn_all(settings: Settings) -> None:
    """Learn what was sent, with a real worker, until the stream is empty."""
    client = aioredis.Redis.from_url(str(settings.redis_url))
    store = ModelStore(client, model_spec(settings))
    await Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry())).run_until_idle()
    await client.aclose()


def test_the_own_model_expires_and_says_how_many(client: TestClient, settings: Settings) -> None:
    info = client.get("/models/default").json()
    assert (info["expire_after"], info["features_expired"]) == (SPAN, 0)
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_all(settings))
    info = client.get("/models/default").json()
    assert info["global_step"] == len(ROWS) and info["features_expired"] > 0
    # Predictions read the model as it is: features gone count for nothing.
    reply = client.post("/predict", json={"examples": [{"features": ROWS[0][0]}]})
    assert reply.status_code == 200, reply.text


def test_a_model_is_created_with_a_span_and_refused_a_bad_one(client: TestClient) -> None:
    made = client.put("/models/short", json={"rule": "ftrl", "expire_after": 5000})
    assert made.status_code == 201, made.text
    assert client.get("/models/short").json()["expire_after"] == 5000
    for bad in (-1, 1.5, "soon", 2**53):
        reply = client.put("/models/bad", json={"expire_after": bad})
        assert reply.status_code == 422 and "expire_after" in reply.text, reply.text
    compact = client.put(
        "/models/bad", json={"rule": "ftrl", "expire_after": 10, "state_encoding": "compact"}
    )
    assert compact.status_code == 422 and "float64" in compact.text, compact.text


def test_a_model_without_a_span_is_recorded_as_before(redis_url: str, plain: Any) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        assert client.get("/models/default").json()["expire_after"] == 0
    assert b"expire_after" not in plain.hget(RegistryKeys().models, "default")


def test_the_setting_refuses_the_compact_encoding_naming_both() -> None:
    with pytest.raises(ValidationError, match="OCTR_EXPIRE_AFTER needs OCTR_STATE_ENCODING"):
        Settings(expire_after=10, state_encoding="compact", rule="ftrl")


def test_its_snapshot_moves_it_and_none_of_another_span_replaces_it(
    client: TestClient, settings: Settings
) -> None:
    """An expiring model's snapshot imports as a model of the same span and counts; a
    snapshot of a model that keeps its features is refused as the served model, its spec
    naming the setting."""
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_all(settings))
    blob = client.get("/models/default/snapshot")
    assert blob.status_code == 200, blob.text
    assert client.put("/models/copy/snapshot", content=blob.content).status_code == 201
    fields = ("expire_after", "features_expired", "features_tracked", "nonzero_weights")
    original, copy = client.get("/models/default").json(), client.get("/models/copy").json()
    assert [copy[f] for f in fields] == [original[f] for f in fields]
    assert copy["expire_after"] == SPAN and copy["features_expired"] > 0
    assert client.put("/models/keeper", json={"rule": "rda"}).status_code == 201
    blob = client.get("/models/keeper/snapshot")
    assert blob.status_code == 200, blob.text
    replaced = client.put("/models/default/snapshot?replace=true", content=blob.content)
    assert replaced.status_code == 409, replaced.text
    assert f"OCTR_EXPIRE_AFTER=0 (served: {SPAN})" in replaced.json()["detail"]
