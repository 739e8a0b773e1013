"""The one way into /predict and /learn (service.api.lane.LaneRoute): the endpoint takes the
Request; a body the compiled scan reads is answered from its bytes, exactly as validation
would answer it, and every other body is validated whole, as FastAPI would have."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from service.api.lane import LaneRoute
from service.app import create_app
from tests.service.keys import AUTH, HEADERS

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

JSON = {"content-type": "application/json"}
ROUTES = ("/predict", "/learn")


def plain(path: str, value: str = "news") -> bytes:
    """A body the scanner reads: one example, its values plain strings."""
    example: dict[str, Any] = {"features": {"site": value, "hour": "3"}}
    if path == "/learn":
        example["label"] = 1
    return json.dumps(example).encode()


def escaped(path: str, value: str = "news") -> bytes:
    """The same example, with an escape the scanner leaves to validation."""
    return plain(path, value).replace(b'"features"', b'"\\u0066eatures"')


def scanned_names(client: TestClient, path: str) -> int:
    """How many names the route's scanned path has looked up so far (it grows only when a
    body with new names takes that path)."""
    served = client.app.state.served  # type: ignore[attr-defined]
    return int((served.names if path == "/predict" else served.learn_names).count)


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    """The real app (at most 3 examples a request)."""
    settings = Settings(redis_url=redis_url, state_buckets=64, max_examples_per_request=3, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        yield client


@pytest.mark.parametrize("path", ROUTES)
def test_plain_bodies_are_scanned_and_answered_as_validation_answers(
    client: TestClient, path: str
) -> None:
    before = scanned_names(client, path)
    fast = client.post(path, content=plain(path, "first"), headers=JSON)
    scanned = scanned_names(client, path)
    assert scanned > before  # the scanned path took it
    slow = client.post(path, content=escaped(path, "second"), headers=JSON)
    assert scanned_names(client, path) == scanned  # validation took it
    assert (fast.status_code, fast.json().keys()) == (slow.status_code, slow.json().keys())
    assert fast.status_code == (200 if path == "/predict" else 202)
    assert fast.headers["content-type"] == slow.headers["content-type"]
    if path == "/predict":
        again = client.post(path, content=escaped(path, "first"), headers=JSON)
        assert again.json() == fast.json()


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(
    ("body", "headers", "status", "says"),
    [
        (b'{"features": {"a": "b"}', JSON, 422, "JSON"),  # malformed: validation names it
        (b"", JSON, 422, "body"),  # no body at all
        (b'{"features": {"a": "\xff"}}', JSON, 422, "UTF-8"),
        (b"[" * 5000 + b"]" * 5000, JSON, 422, "body"),  # nested past the parser's depth
        (None, {"content-type": "text/plain"}, 415, "Content-Type: application/json"),
        (None, {}, 415, "no Content-Type"),
        (None, {"content-type": "application/vnd.ctr+json"}, 200, ""),  # JSON, not scanned
    ],
)
def test_other_bodies_are_validated_whole(
    client: TestClient,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    status: int,
    says: str,
) -> None:
    sent = plain(path) if body is None else body
    reply = client.post(path, content=sent, headers=headers)
    expected = 202 if status == 200 and path == "/learn" else status
    assert reply.status_code == expected, reply.text
    assert says in reply.text


@pytest.mark.parametrize("path", ROUTES)
def test_a_plain_body_over_the_limits_is_refused_by_validation(
    client: TestClient, path: str
) -> None:
    example = json.loads(plain(path))
    body = json.dumps({"examples": [example] * 4}).encode()  # scanned, then over the limit
    reply = client.post(path, content=body, headers=JSON)
    assert reply.status_code == 422
    assert "at most 3" in reply.text  # validation saw the whole body the scan had read


@pytest.mark.parametrize("path", ROUTES)
def test_an_unknown_model_is_a_404_and_an_invalid_body_a_422_first(
    client: TestClient, path: str
) -> None:
    unknown = client.post(path, content=plain(path), headers=JSON, params={"model": "other"})
    assert unknown.status_code == 404
    assert unknown.json() == {"detail": "no model or group 'other' (GET /models lists them)"}
    invalid = client.post(path, content=b"{}", headers=JSON, params={"model": "other"})
    assert invalid.status_code == 422  # the body is checked before the model is looked up


@pytest.mark.parametrize("path", ROUTES)
def test_other_methods_and_paths_are_the_routers(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 405
    slash = client.post(f"{path}/", content=plain(path), headers=JSON, follow_redirects=False)
    assert slash.status_code == 307  # the router's redirect, as for any route


def test_behind_a_path_prefix_plain_bodies_are_still_scanned(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    app = create_app(settings, CollectorRegistry())
    with TestClient(app, headers=HEADERS, root_path="/ctr") as client:
        fast = client.post("/ctr/predict", content=plain("/predict"), headers=JSON)
        assert fast.status_code == 200, fast.text
        assert scanned_names(client, "/predict") > 0
        slow = client.post("/ctr/predict", content=escaped("/predict"), headers=JSON)
        assert fast.json() == slow.json()


@pytest.mark.parametrize("path", ROUTES)
def test_redis_down_is_a_503_with_retry_after_on_either_path(
    make_redis_server: Callable[..., RedisServer], path: str
) -> None:
    server = make_redis_server(persist=False)
    settings = Settings(
        redis_url=server.url, state_buckets=64, redis_timeout_s=0.5, retry_after_s=3, **AUTH
    )
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        assert client.post(path, content=plain(path), headers=JSON).status_code < 300
        server.stop()
        fast = client.post(path, content=plain(path), headers=JSON)
        slow = client.post(path, content=escaped(path), headers=JSON)
        assert (fast.status_code, slow.status_code) == (503, 503)
        assert fast.headers["Retry-After"] == slow.headers["Retry-After"] == "3"
        assert fast.json() == slow.json()
        assert "Redis is unavailable" in fast.json()["detail"]


def test_a_lane_route_needs_the_body_it_reads_declared() -> None:
    router = APIRouter(route_class=LaneRoute)

    async def undeclared(request: Request) -> Response:
        return Response()

    with pytest.raises(TypeError, match="needs @reads_body"):
        router.post("/x")(undeclared)
