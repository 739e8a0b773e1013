"""/metrics shows model names only to a key that may read them, and forgets deleted models.

Model names are what ``GET /models`` lists to administrators: on an open /metrics the series
labelled ``model`` are left out unless the request's key has the ``metrics`` scope (or
``admin``, which includes it); a deleted model's series leave /metrics, so label values stay
bounded by the models that exist (issue 33, item 4).
"""

from __future__ import annotations

import json
import warnings

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from online_ctr.config.settings import Settings
from service.app import create_app
from tests.service.keys import ADMIN_KEY, KEYS, PREDICT_KEY

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

SCRAPER_KEY = "scraper-key-for-the-tests-0000"
KEYS_WITH_SCRAPER = {**KEYS, SCRAPER_KEY: ["metrics"]}
MODEL_SERIES = 'online_ctr_predictions_total{model="default"}'


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    keys = SecretStr(json.dumps(KEYS_WITH_SCRAPER))
    return Settings(redis_url=redis_url, state_buckets=64, api_keys=keys)


def scrape(client: TestClient, key: str | None) -> str:
    reply = client.get("/metrics", headers=bearer(key) if key else {"Authorization": ""})
    assert reply.status_code == 200
    return reply.text


@pytest.mark.parametrize("key", [None, PREDICT_KEY])
def test_without_the_scope_no_model_series_and_a_comment_says_why(
    client: TestClient, key: str | None
) -> None:
    client.post("/predict", json={"features": {"site": "news"}}, headers=bearer(ADMIN_KEY))
    text = scrape(client, key)
    assert 'model="' not in text
    assert text.startswith("# online-ctr: series with a model label are shown only with")
    # The process's own series are still there, with their HELP and TYPE.
    assert "online_ctr_http_requests_total{" in text
    assert "# TYPE online_ctr_predictions_total counter" in text


@pytest.mark.parametrize("key", [SCRAPER_KEY, ADMIN_KEY])
def test_a_metrics_or_admin_key_sees_every_series(client: TestClient, key: str) -> None:
    client.post("/predict", json={"features": {"site": "news"}}, headers=bearer(ADMIN_KEY))
    text = scrape(client, key)
    assert f"{MODEL_SERIES} 1.0" in text
    assert "online-ctr: series with a model label" not in text


def test_the_metrics_scope_opens_nothing_else(client: TestClient) -> None:
    assert client.get("/models", headers=bearer(SCRAPER_KEY)).status_code == 403
    reply = client.post("/predict", json={"features": {}}, headers=bearer(SCRAPER_KEY))
    assert reply.status_code == 403


def test_with_auth_off_every_series_is_shown(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, auth="off")
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        client.post("/predict", json={"features": {"site": "news"}})
        assert f"{MODEL_SERIES} 1.0" in client.get("/metrics").text


def test_protected_metrics_take_a_metrics_key(redis_url: str) -> None:
    keys = SecretStr(json.dumps(KEYS_WITH_SCRAPER))
    settings = Settings(redis_url=redis_url, state_buckets=64, api_keys=keys, protect_metrics=True)
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        assert client.get("/metrics", headers=bearer(PREDICT_KEY)).status_code == 403
        assert client.get("/metrics", headers=bearer(SCRAPER_KEY)).status_code == 200
        assert client.get("/metrics", headers=bearer(ADMIN_KEY)).status_code == 200


def test_a_deleted_model_leaves_metrics(client: TestClient) -> None:
    admin = bearer(ADMIN_KEY)
    for name in ("short-lived", "kept"):
        created = client.put(f"/models/{name}", json={"rule": "ftrl"}, headers=admin)
        assert created.status_code in (200, 201), created.text
        reply = client.post(f"/predict?model={name}", json={"features": {"a": "b"}}, headers=admin)
        assert reply.status_code == 200, reply.text
    text = scrape(client, ADMIN_KEY)
    assert 'model="short-lived"' in text
    assert client.delete("/models/short-lived", headers=admin).status_code in (200, 204)
    text = scrape(client, ADMIN_KEY)
    assert 'model="short-lived"' not in text
    assert 'online_ctr_predictions_total{model="kept"} 1.0' in text
