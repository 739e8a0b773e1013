"""Keys scoped to models: every route that names a model or group, times a key scoped to one
model (and one group), a key scoped to a prefix, and a key of every model; a group's request
checked where it lands; GET /models and /metrics show a key only its models (issue 49, 1)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from online_ctr.config.settings import Settings
from service.app import create_app
from tests.service.keys import ADMIN_KEY

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


LAYOUT = {"state_buckets": 64, "state_shards": 8}
MODEL = {"rule": "ftrl", **LAYOUT}
#: Models of no group, and groups with their models (the first serves).
MODELS = ("ads-1", "ads-2", "other")
GROUPS = {"ads-g": ("ads-g-a", "ads-g-b"), "other-g": ("other-g-a",)}
ONE_KEY = "key-of-one-model-and-one-group-0"
PREFIX_KEY = "key-of-the-ads-prefix-000000000"
EVERY_KEY = "key-of-every-model-0000000000000"
SCOPES = ("predict", "learn", "admin")
KEYS = {
    ADMIN_KEY: list(SCOPES),
    ONE_KEY: [f"{s}:{name}" for s in SCOPES for name in ("ads-1", "ads-g")],
    PREFIX_KEY: [f"{s}:ads-*" for s in SCOPES],
    EVERY_KEY: [f"{s}:*" for s in SCOPES],
}
#: Per key, the names it reaches.
REACHES: dict[str, Callable[[str], bool]] = {
    ONE_KEY: lambda name: name in ("ads-1", "ads-g"),
    PREFIX_KEY: lambda name: name.startswith("ads-"),
    EVERY_KEY: lambda name: True,
}


@dataclass(frozen=True)
class Route:
    """A route that names a model or group: how to call it on ``name``, the scope it needs
    and the names it needs it on."""

    method: str
    path: str
    scope: str
    body: Any = None
    needs: Callable[[str], list[str]] = lambda name: [name]
    groups: bool = False  # its name is a group's (else a model's)
    content: bytes | None = None

    def call(self, client: TestClient, name: str, key: str) -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        url = self.path.format(name=name)
        if self.content is not None:
            return client.request(self.method, url, content=self.content, headers=headers)
        return client.request(self.method, url, json=self.body, headers=headers)


SWEEP = {"grid": {"alpha": [0.2]}, "base": MODEL}
ROUTES = [
    Route("POST", "/predict?model={name}", "predict", {"features": {"site": "news"}}),
    Route("POST", "/predict?model={name}", "predict", {"features": {"a": "b"}}, groups=True),
    Route("POST", "/learn?model={name}", "learn", {"features": {"site": "news"}, "label": 1}),
    Route(
        "POST", "/learn?model={name}", "learn", {"features": {"a": "b"}, "label": 0}, groups=True
    ),
    Route("GET", "/models/{name}", "admin"),
    Route("PUT", "/models/{name}", "admin", MODEL),
    Route("DELETE", "/models/{name}", "admin"),
    Route("GET", "/models/{name}/weights?feature=site=news", "admin"),
    Route("GET", "/models/{name}/snapshot", "admin"),
    Route("PUT", "/models/{name}/snapshot", "admin", content=b"not a snapshot"),
    Route("GET", "/groups/{name}", "admin", groups=True),
    Route("PUT", "/groups/{name}", "admin", {"serving": "{serving}"}, groups=True),
    Route(
        "POST",
        "/groups/{name}/sweep",
        "admin",
        SWEEP,
        needs=lambda name: [name, f"{name}-alpha_0.2"],
        groups=True,
    ),
    Route("PUT", "/groups/{name}/promotion", "admin", {"margin": 0.01}, groups=True),
    Route("DELETE", "/groups/{name}/promotion", "admin", groups=True),
]


def settings_for(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, **LAYOUT, api_keys=SecretStr(json.dumps(KEYS)))


def create_models(client: TestClient) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    for name in MODELS:
        assert client.put(f"/models/{name}", json=MODEL, headers=admin).status_code in (200, 201)
    for group, members in GROUPS.items():
        for name in members:
            created = client.put(f"/models/{name}", json={**MODEL, "group": group}, headers=admin)
            assert created.status_code in (200, 201), created.text


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(redis_url), CollectorRegistry())) as client:
        create_models(client)
        yield client


def with_serving(route: Route, name: str) -> Route:
    """The route's body with the group's serving model filled in."""
    if route.body != {"serving": "{serving}"}:
        return route
    return Route(route.method, route.path, route.scope, {"serving": GROUPS[name][0]})


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_every_route_x_every_key(client: TestClient, route: Route) -> None:
    targets = list(GROUPS) if route.groups else list(MODELS)
    for key, reaches in REACHES.items():
        for name in targets:
            answer = with_serving(route, name).call(client, name, key)
            lacking = [n for n in route.needs(name) if not reaches(n)]
            if lacking:
                assert answer.status_code == 403, (key, name, answer.text)
                detail = answer.json()["detail"]
                # A group's /predict or /learn is checked where it lands, and names that model.
                landing = GROUPS[name][0] if route.groups and route.scope != "admin" else None
                named = lacking[0] if landing is None else landing
                assert f"lacks the {route.scope!r} scope on {named!r}" in detail, detail
                assert route.path.split("?")[0].format(name=name) in detail
            else:
                assert answer.status_code not in (401, 403), (key, name, answer.text)
                assert answer.status_code < 500, (key, name, answer.text)
            if (
                route.method == "DELETE"
                and answer.status_code < 300
                and "/promotion" not in (route.path)
            ):
                create_models(client)  # what the key was let delete comes back


def test_a_model_in_a_group_needs_the_group_too(client: TestClient) -> None:
    headers = {"Authorization": f"Bearer {PREFIX_KEY}"}
    refused = client.put("/models/ads-new", json={**MODEL, "group": "other-g"}, headers=headers)
    assert refused.status_code == 403
    assert "lacks the 'admin' scope on 'other-g'" in refused.json()["detail"]
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert client.get("/models/ads-new", headers=admin).status_code == 404  # nothing created


def test_an_unknown_name_is_a_403_to_a_key_that_may_not_use_it(client: TestClient) -> None:
    body = {"features": {"a": "b"}}
    for key, status in ((ONE_KEY, 403), (PREFIX_KEY, 403), (EVERY_KEY, 404)):
        answer = client.post("/predict?model=nope", json=body, headers=bearer(key))
        assert answer.status_code == status, (key, answer.text)
    # and the service's own model is a model like any other
    assert client.post("/predict", json=body, headers=bearer(PREFIX_KEY)).status_code == 403


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def app_with(redis_url: str, keys: dict[str, list[str]]) -> TestClient:
    settings = Settings(redis_url=redis_url, **LAYOUT, api_keys=SecretStr(json.dumps(keys)))
    return TestClient(create_app(settings, CollectorRegistry()))


def split_key_landing_on(client: TestClient, model: str) -> str:
    """A split key the group ads-g's split sends to ``model``."""
    for n in range(1000):
        body = {"features": {"a": "b"}, "split_key": f"user-{n}"}
        answer = client.post("/predict?model=ads-g", json=body, headers=bearer(ADMIN_KEY))
        if answer.json()["model"] == model:
            return f"user-{n}"
    raise AssertionError(f"no split key lands on {model}")


def test_a_group_request_is_checked_where_it_lands(redis_url: str) -> None:
    serving_only = "key-of-the-serving-model-only-00"
    members = "key-of-the-group-models-00000000"
    keys = {
        ADMIN_KEY: list(SCOPES),
        serving_only: ["predict:ads-g-a", "learn:ads-g-a"],
        members: ["learn:ads-g-*"],
    }
    with app_with(redis_url, keys) as client:
        create_models(client)
        split = {"serving": "ads-g-a", "split": {"ads-g-a": 1.0, "ads-g-b": 1.0}}
        answer = client.put("/groups/ads-g", json=split, headers=bearer(ADMIN_KEY))
        assert answer.status_code == 200, answer.text
        to_b = split_key_landing_on(client, "ads-g-b")
        to_a = split_key_landing_on(client, "ads-g-a")
        url, key = "/predict?model=ads-g", bearer(serving_only)
        assert client.post(url, json={"features": {"a": "b"}}, headers=key).status_code == 200
        body = {"features": {"a": "b"}, "split_key": to_a}
        assert client.post(url, json=body, headers=key).json()["model"] == "ads-g-a"
        refused = client.post(url, json={**body, "split_key": to_b}, headers=key)
        assert refused.status_code == 403
        assert "lacks the 'predict' scope on 'ads-g-b'" in refused.json()["detail"]
        assert "via group 'ads-g'" in refused.json()["detail"]
        # /learn lands in every model of the group: one of them is not enough.
        example = {"features": {"a": "b"}, "label": 1}
        refused = client.post("/learn?model=ads-g", json=example, headers=key)
        assert refused.status_code == 403
        assert "lacks the 'learn' scope on 'ads-g-b'" in refused.json()["detail"]
        learned = client.post("/learn?model=ads-g", json=example, headers=bearer(members))
        assert learned.status_code == 202, learned.text


def test_the_listing_shows_a_key_its_models_only(client: TestClient) -> None:
    listing = client.get("/models", headers=bearer(PREFIX_KEY)).json()
    names = [model["name"] for model in listing["models"]]
    assert names == ["ads-1", "ads-2", "ads-g-a", "ads-g-b"]
    assert [group["name"] for group in listing["groups"]] == ["ads-g"]
    everything = client.get("/models", headers=bearer(EVERY_KEY)).json()
    assert {m["name"] for m in everything["models"]} > {"other", "other-g-a", "default"}


def test_metrics_show_a_key_the_series_of_its_models(client: TestClient) -> None:
    for name in ("ads-1", "other"):
        answer = client.post(
            f"/predict?model={name}", json={"features": {"a": "b"}}, headers=bearer(ADMIN_KEY)
        )
        assert answer.status_code == 200
    text = client.get("/metrics", headers=bearer(PREFIX_KEY)).text
    assert 'online_ctr_predictions_total{model="ads-1"} 1.0' in text
    assert 'model="other"' not in text and 'model="default"' not in text
    assert text.startswith("# online-ctr: series with a model label are shown only")
    text = client.get("/metrics", headers=bearer(EVERY_KEY)).text
    assert 'online_ctr_predictions_total{model="other"} 1.0' in text
    assert "# online-ctr: series" not in text
