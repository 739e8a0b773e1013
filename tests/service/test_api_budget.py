"""A feature budget as a model setting: ``max_features`` in PUT /models, OCTR_MAX_FEATURES for
the service's own model, shown by GET /models/{name} with the features evicted so far, and
refused with a message where it cannot work."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from online_ctr.config.settings import Settings
from online_ctr.store.keys import RegistryKeys
from service.app import create_app
from tests.service.keys import AUTH, HEADERS
from tests.service.test_api_expiry import ROWS, learn_all

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

MOST = 1000


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, max_features=MOST, **AUTH
    )


def test_the_own_model_holds_its_budget_and_says_how_many_it_evicted(
    client: TestClient, settings: Settings
) -> None:
    info = client.get("/models/default").json()
    assert (info["max_features"], info["features_evicted"]) == (MOST, 0)
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_all(settings))
    info = client.get("/models/default").json()
    assert info["global_step"] == len(ROWS) and info["features_evicted"] > 5_000
    # At most the budget, and the features of the current bin of 64 examples.
    assert info["features_held"] <= MOST + 64 * 40 < info["features_tracked"]
    reply = client.post("/predict", json={"examples": [{"features": ROWS[0][0]}]})
    assert reply.status_code == 200, reply.text
    metrics = client.get("/metrics").text
    assert 'online_ctr_features_tracked{model="default"}' in metrics


def test_a_model_is_created_with_a_budget_and_refused_a_bad_one(client: TestClient) -> None:
    made = client.put("/models/small", json={"rule": "fobos", "max_features": 5000})
    assert made.status_code == 201, made.text
    assert client.get("/models/small").json()["max_features"] == 5000
    for bad in (-1, 1.5, "many", 2**53):
        reply = client.put("/models/bad", json={"max_features": bad})
        assert reply.status_code == 422 and "max_features" in reply.text, reply.text
    compact = client.put(
        "/models/bad", json={"rule": "ftrl", "max_features": 10, "state_encoding": "compact"}
    )
    assert compact.status_code == 422 and "float64" in compact.text, compact.text
    both = client.put("/models/bad", json={"max_features": 10, "expire_after": 10})
    assert both.status_code == 422 and "not both" in both.text, both.text


def test_a_model_without_a_budget_is_recorded_as_before(redis_url: str, plain: Any) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        assert client.get("/models/default").json()["max_features"] == 0
    assert b"max_features" not in plain.hget(RegistryKeys().models, "default")


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"state_encoding": "compact"}, "OCTR_MAX_FEATURES needs OCTR_STATE_ENCODING"),
        ({"expire_after": 10}, "OCTR_EXPIRE_AFTER and OCTR_MAX_FEATURES cannot both be set"),
        ({"max_features": -1}, "max_features"),
    ],
)
def test_the_setting_refuses_what_it_cannot_do_naming_it(
    settings: dict[str, Any], says: str
) -> None:
    with pytest.raises(ValidationError, match=says):
        Settings(**{"max_features": 10, "rule": "ftrl", **settings})


def test_its_snapshot_moves_it_and_none_of_another_budget_replaces_it(
    client: TestClient, settings: Settings
) -> None:
    """A budgeted model's snapshot imports as a model of the same budget and counts (only the
    features it holds); a snapshot of a model without one is refused as the served model,
    its spec naming the setting."""
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_all(settings))
    blob = client.get("/models/default/snapshot")
    assert blob.status_code == 200, blob.text
    assert client.put("/models/copy/snapshot", content=blob.content).status_code == 201
    fields = ("max_features", "features_evicted", "features_held", "nonzero_weights")
    original, copy = client.get("/models/default").json(), client.get("/models/copy").json()
    assert [copy[f] for f in fields] == [original[f] for f in fields]
    assert copy["features_tracked"] == copy["features_held"] < original["features_tracked"]
    assert client.put("/models/keeper", json={"rule": "ftrl"}).status_code == 201
    blob = client.get("/models/keeper/snapshot")
    assert blob.status_code == 200, blob.text
    replaced = client.put("/models/default/snapshot?replace=true", content=blob.content)
    assert replaced.status_code == 409, replaced.text
    assert f"OCTR_MAX_FEATURES=0 (served: {MOST})" in replaced.json()["detail"]
