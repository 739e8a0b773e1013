"""Redis faults: 503 with Retry-After (never 500, never a hang), recovery without a restart,
nothing answered 202 lost, and a loud failure for a model created with other settings."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from online_ctr.store.keys import ModelKeys
from online_ctr.store.state import ModelMismatchError
from service.app import create_app
from tests.service.keys import AUTH, HEADERS

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

MakeServer = Callable[..., RedisServer]
KEYS = ModelKeys("default")
PREDICT = {"features": {"site": "news", "hour": 3.0}}
LEARN = {"features": {"site": "news", "hour": 3.0}, "label": 1}


def settings_for(server: RedisServer, **overrides: Any) -> Settings:
    return Settings(
        redis_url=server.url,
        state_buckets=64,
        redis_timeout_s=0.5,
        retry_after_s=3,
        **AUTH,
        **overrides,
    )


def client_for(server: RedisServer) -> TestClient:
    """The app on ``server``, with a client that sends an admin key."""
    return TestClient(create_app(settings_for(server), CollectorRegistry()), headers=HEADERS)


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def assert_unavailable(reply: Any) -> None:
    assert reply.status_code == 503, reply.text
    assert reply.headers["Retry-After"] == "3"
    assert reply.json()["detail"]


def test_redis_down_is_503_then_recovers_and_keeps_every_202(
    make_redis_server: MakeServer,
) -> None:
    server = make_redis_server(persist=True)
    accepted = 0
    with TestClient(
        create_app(settings_for(server), CollectorRegistry()), headers=HEADERS
    ) as client:
        for _ in range(3):
            assert client.post("/learn", json=LEARN).status_code == 202
            accepted += 1
        server.stop()
        assert_unavailable(client.post("/predict", json=PREDICT))
        assert_unavailable(client.post("/learn", json=LEARN))
        assert_unavailable(client.get("/readyz"))
        assert_unavailable(client.get("/models/default"))
        assert "Redis is unavailable" in client.post("/predict", json=PREDICT).json()["detail"]
        assert client.get("/healthz").status_code == 200
        metrics = client.get("/metrics")  # scrapes keep working in the outage
        assert metrics.status_code == 200 and "online_ctr_http_requests_total" in metrics.text

        server.start()  # same port, same append-only file
        wait_until(lambda: client.post("/predict", json=PREDICT).status_code == 200, "predict")
        for _ in range(2):
            assert client.post("/learn", json=LEARN).status_code == 202
            accepted += 1
        assert client.get("/models/default").json()["stream_lag"] == accepted
    plain = redis.Redis.from_url(server.url)
    assert plain.xlen(KEYS.stream) == accepted
    plain.close()


def test_starts_with_redis_down_and_creates_the_model_on_first_use(
    make_redis_server: MakeServer,
) -> None:
    server = make_redis_server(persist=False)
    server.stop()
    with TestClient(
        create_app(settings_for(server), CollectorRegistry()), headers=HEADERS
    ) as client:
        assert client.get("/healthz").status_code == 200
        assert_unavailable(client.post("/predict", json=PREDICT))
        server.start()
        wait_until(lambda: client.post("/predict", json=PREDICT).status_code == 200, "predict")
        assert client.get("/models/default").json()["rule"] == "ftrl"
    plain = redis.Redis.from_url(server.url)
    assert plain.hget(KEYS.meta, "rule") == b"ftrl"
    plain.close()


def test_a_hung_redis_is_503_after_the_timeout(make_redis_server: MakeServer) -> None:
    server = make_redis_server(persist=False)
    with TestClient(
        create_app(settings_for(server), CollectorRegistry()), headers=HEADERS
    ) as client:
        assert client.post("/predict", json=PREDICT).status_code == 200
        plain: Any = redis.Redis.from_url(server.url)
        plain.execute_command("CLIENT", "PAUSE", "3000", "ALL")  # Redis stops answering
        plain.close()
        assert_unavailable(client.post("/predict", json=PREDICT))
        assert_unavailable(client.post("/learn", json=LEARN))
        wait_until(lambda: client.post("/predict", json=PREDICT).status_code == 200, "unpause")


@pytest.mark.parametrize(
    ("refuse", "restore"),
    [
        (("REPLICAOF", "127.0.0.1", "1"), ("REPLICAOF", "NO", "ONE")),  # READONLY
        (("CONFIG", "SET", "maxmemory", "1"), ("CONFIG", "SET", "maxmemory", "0")),  # OOM
    ],
)
def test_redis_refusing_writes_is_503(
    make_redis_server: MakeServer, refuse: tuple[str, ...], restore: tuple[str, ...]
) -> None:
    server = make_redis_server(persist=False)
    plain: Any = redis.Redis.from_url(server.url)
    with TestClient(
        create_app(settings_for(server), CollectorRegistry()), headers=HEADERS
    ) as client:
        assert client.post("/learn", json=LEARN).status_code == 202
        plain.execute_command(*refuse)
        try:
            assert_unavailable(client.post("/learn", json=LEARN))
        finally:
            plain.execute_command(*restore)
        assert client.post("/learn", json=LEARN).status_code == 202
    assert plain.xlen(KEYS.stream) == 2
    plain.close()


def test_a_model_created_with_other_settings_stops_startup(redis_url: str) -> None:
    with TestClient(create_app(Settings(redis_url=redis_url, **AUTH), CollectorRegistry())):
        pass
    app = create_app(Settings(redis_url=redis_url, rule="rda", **AUTH), CollectorRegistry())
    with (
        pytest.raises(ModelMismatchError, match=r"OCTR_RULE=rda \(stored: ftrl\)"),
        TestClient(app),
    ):
        pass
