"""The /predict fast lane (service.api.lane): it answers the bodies the scanner reads, exactly
as the route would, and hands every other request to the route with its body intact."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Receive, Scope, Send

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from service.api.lane import PredictLane
from service.app import create_app
from tests.service.keys import AUTH, HEADERS

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

JSON = {"content-type": "application/json"}
PLAIN = json.dumps({"features": {"site": "news", "hour": "3"}}).encode()
ESCAPED = PLAIN.replace(b'"features"', b'"\\u0066eatures"')  # the scanner leaves escapes


class Routed:
    """The app behind the lane, counting the requests the lane handed to it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.count += 1
        await self.app(scope, receive, send)


@pytest.fixture
def lane_client(redis_url: str) -> Iterator[tuple[TestClient, Routed]]:
    """The real app (at most 3 examples a request), and the counter behind its lane."""
    settings = Settings(redis_url=redis_url, state_buckets=64, max_examples_per_request=3, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        assert client.get("/healthz").status_code == 200  # builds the middleware stack
        lane = _lane(client.app)
        routed = Routed(lane.app)
        lane.app = routed
        yield client, routed


def _lane(app: Any) -> PredictLane:
    layer = app.middleware_stack
    while not isinstance(layer, PredictLane):
        layer = layer.app
    return layer


def post(client: TestClient, body: bytes, **headers: str) -> Any:
    return client.post("/predict", content=body, headers={**JSON, **headers})


def test_plain_bodies_are_answered_by_the_lane_as_the_route_answers(
    lane_client: tuple[TestClient, Routed],
) -> None:
    client, routed = lane_client
    fast = post(client, PLAIN)
    assert routed.count == 0
    slow = post(client, ESCAPED)
    assert routed.count == 1
    assert fast.status_code == slow.status_code == 200
    assert fast.json() == slow.json()
    assert fast.headers["content-type"] == slow.headers["content-type"]


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (ESCAPED, JSON, 200),  # the scanner does not read it: validation does
        (b'{"features": {"a": "b"}', JSON, 422),  # malformed: the route names the problem
        (json.dumps({"examples": [{"features": {"a": "b"}}] * 4}).encode(), JSON, 422),
        (PLAIN, {"content-type": "text/plain"}, 415),  # not JSON: the lane never reads it
    ],
)
def test_other_bodies_reach_the_route_whole(
    lane_client: tuple[TestClient, Routed], body: bytes, headers: dict[str, str], status: int
) -> None:
    client, routed = lane_client
    reply = client.post("/predict", content=body, headers=headers)
    assert (reply.status_code, routed.count) == (status, 1), reply.text
    if status == 422 and b"examples" in body:
        assert "at most 3" in reply.text  # the route saw the whole body the lane had read


def test_the_lane_answers_errors_with_the_apps_handlers(
    lane_client: tuple[TestClient, Routed],
) -> None:
    client, routed = lane_client
    unknown = client.post("/predict", content=PLAIN, headers=JSON, params={"model": "other"})
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": "no model or group 'other' (GET /models lists them)"}
    assert routed.count == 0  # the lane raised it, the app's handler answered


def test_other_methods_and_paths_pass_by(lane_client: tuple[TestClient, Routed]) -> None:
    client, routed = lane_client
    assert client.get("/predict").status_code == 405
    slash = client.post("/predict/", content=PLAIN, headers=JSON, follow_redirects=False)
    assert slash.status_code == 307  # the router's redirect, as for any route
    assert routed.count == 2


def test_behind_a_path_prefix_the_lane_still_answers(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    app = create_app(settings, CollectorRegistry())
    with TestClient(app, headers=HEADERS, root_path="/ctr") as client:
        assert client.get("/healthz").status_code == 200
        lane = _lane(client.app)
        routed = Routed(lane.app)
        lane.app = routed
        fast = client.post("/ctr/predict", content=PLAIN, headers=JSON)
        assert (fast.status_code, routed.count) == (200, 0), fast.text
        slow = client.post("/ctr/predict", content=ESCAPED, headers=JSON)
        assert (slow.status_code, routed.count) == (200, 1), slow.text
        assert fast.json() == slow.json()


def test_redis_down_is_the_routes_503_with_retry_after(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server(persist=False)
    settings = Settings(
        redis_url=server.url, state_buckets=64, redis_timeout_s=0.5, retry_after_s=3, **AUTH
    )
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        assert post(client, PLAIN).status_code == 200
        lane = _lane(client.app)
        routed = Routed(lane.app)
        lane.app = routed
        server.stop()
        fast, slow = post(client, PLAIN), post(client, ESCAPED)
        assert (fast.status_code, slow.status_code, routed.count) == (503, 503, 1)
        assert fast.headers["Retry-After"] == slow.headers["Retry-After"] == "3"
        assert fast.json() == slow.json()
        assert "Redis is unavailable" in fast.json()["detail"]
