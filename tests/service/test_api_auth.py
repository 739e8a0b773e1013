"""API keys and scopes: 401 without a valid key, 403 without the scope, open health checks,
protectable metrics and docs, and startup refused without keys unless auth is off."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from online_ctr.config.settings import Settings
from service.app import create_app
from tests.service.keys import ADMIN_KEY, AUTH, LEARN_KEY, PREDICT_KEY

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

PREDICT = {"features": {"site": "news"}}
LEARN = {"features": {"site": "news"}, "label": 1}
CALLS = {
    "predict": ("POST", "/predict", PREDICT),
    "learn": ("POST", "/learn", LEARN),
    "admin": ("GET", "/models/default", None),
}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, **AUTH)


def call(client: TestClient, scope: str, **headers: str) -> Any:
    method, path, body = CALLS[scope]
    return client.request(method, path, json=body, headers=headers)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("scope", list(CALLS))
def test_no_key_is_401_with_a_challenge(client: TestClient, scope: str) -> None:
    reply = call(client, scope, Authorization="")
    assert reply.status_code == 401
    assert reply.headers["WWW-Authenticate"] == 'Bearer realm="online-ctr"'
    method, path, _ = CALLS[scope]
    assert reply.json() == {
        "detail": f"{method} {path} needs the {scope!r} scope: send "
        "'Authorization: Bearer <key>' (or 'X-API-Key: <key>')"
    }


@pytest.mark.parametrize(
    "headers",
    [
        bearer("not-a-key-we-know-0000000000"),
        {"X-API-Key": "not-a-key-we-know-0000000000"},
        {"Authorization": f"Basic {ADMIN_KEY}"},  # a known key, but not as a bearer token
    ],
)
def test_an_unknown_key_is_401(client: TestClient, headers: dict[str, str]) -> None:
    reply = client.post("/predict", json=PREDICT, headers={"Authorization": "", **headers})
    assert reply.status_code == 401
    assert reply.headers["WWW-Authenticate"].startswith('Bearer realm="online-ctr"')
    assert "needs" in reply.json()["detail"]


@pytest.mark.parametrize(
    ("key", "allowed"),
    [(PREDICT_KEY, {"predict"}), (LEARN_KEY, {"learn"}), (ADMIN_KEY, set(CALLS))],
)
def test_each_key_reaches_exactly_its_scopes(
    client: TestClient, key: str, allowed: set[str]
) -> None:
    for scope in CALLS:
        reply = call(client, scope, **bearer(key))
        if scope in allowed:
            assert reply.status_code in (200, 202), reply.text
        else:
            assert reply.status_code == 403
            assert f"lacks the {scope!r} scope" in reply.json()["detail"]
            assert "WWW-Authenticate" not in reply.headers
    # The same key as X-API-Key works the same way.
    first = sorted(allowed)[0]
    assert call(client, first, Authorization="", **{"X-API-Key": key}).status_code < 300


def test_health_metrics_and_docs_are_open_by_default(client: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"):
        assert client.get(path, headers={"Authorization": ""}).status_code in (200, 503), path


def test_metrics_and_docs_can_be_protected(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, protect_metrics=True, protect_docs=True, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer(PREDICT_KEY)).status_code == 403
        assert client.get("/metrics", headers=bearer(ADMIN_KEY)).status_code == 200
        for path in ("/docs", "/openapi.json"):
            assert client.get(path).status_code == 401
            assert client.get(path, headers=bearer(PREDICT_KEY)).status_code == 200
        refused = 'online_ctr_http_requests_total{method="GET",route="/metrics",status_class="4xx"}'
        assert f"{refused} 2.0" in client.get("/metrics", headers=bearer(ADMIN_KEY)).text


def test_keys_from_a_file(redis_url: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# ops\n{PREDICT_KEY} predict\n{LEARN_KEY} learn,predict  # the feeder\n")
    settings = Settings(redis_url=redis_url, api_keys_file=keys)
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        assert client.post("/learn", json=LEARN, headers=bearer(LEARN_KEY)).status_code == 202
        assert client.post("/learn", json=LEARN, headers=bearer(PREDICT_KEY)).status_code == 403


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "no API keys are configured: set OCTR_API_KEYS or OCTR_API_KEYS_FILE"),
        ({"api_keys": SecretStr("[1]")}, "OCTR_API_KEYS must be a JSON object"),
        ({"api_keys": SecretStr('{"short": ["predict"]}')}, "at least 16 printable ASCII"),
        ({"api_keys": SecretStr(json.dumps({ADMIN_KEY: ["root"]}))}, "got ['root']"),
        ({"api_keys_file": Path("/no/such/file")}, "OCTR_API_KEYS_FILE: cannot read"),
    ],
)
def test_auth_without_usable_keys_refuses_to_start(
    redis_url: str, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(SystemExit, match=r"^online-ctr: ") as refused:
        create_app(Settings(redis_url=redis_url, **settings), CollectorRegistry())
    assert message in str(refused.value.code)
    assert "short" not in str(refused.value.code)  # keys never appear in messages


def test_auth_off_lets_everyone_in(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, auth="off")
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        assert client.post("/learn", json=LEARN).status_code == 202
        assert client.get("/models/default").status_code == 200
        assert "securitySchemes" not in client.get("/openapi.json").json()["components"]


def test_behind_a_root_path_every_route_still_needs_its_key(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), root_path="/ctr") as client:
        for scope, (method, path, body) in CALLS.items():
            url = f"/ctr{path}"
            assert client.request(method, url, json=body).status_code == 401, path
            refused = client.request(method, url, json=body, headers=bearer(PREDICT_KEY))
            assert refused.status_code == (200 if scope == "predict" else 403), path
            allowed = client.request(method, url, json=body, headers=bearer(ADMIN_KEY))
            assert allowed.status_code in (200, 202), allowed.text
