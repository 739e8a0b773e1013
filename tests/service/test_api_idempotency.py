"""Idempotent /learn: a retry with the same Idempotency-Key is answered as the first attempt
and never appended twice, even when the first attempt's answer was a timeout (503) that Redis
carried out anyway."""

from __future__ import annotations

import os
import signal
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from online_ctr.store.keys import ModelKeys
from service.app import create_app
from tests.service.keys import AUTH, HEADERS

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

KEYS = ModelKeys("default")
LEARN = {"features": {"site": "news", "hour": 3.0}, "label": 1}
OTHER = {"examples": [{"features": {"site": "blog"}, "label": 0}] * 2}
TIMEOUT_S = 0.5


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, idempotency_window_s=600, **AUTH)


@pytest.fixture
def stream(redis_url: str) -> Iterator[Callable[[], int]]:
    client: Any = redis.Redis.from_url(redis_url)
    yield lambda: int(client.xlen(KEYS.stream))
    client.close()


def learn(client: TestClient, body: dict[str, Any], key: str | None) -> Any:
    return client.post("/learn", json=body, headers={"Idempotency-Key": key} if key else {})


def test_a_retry_is_answered_as_the_first_attempt_without_appending(
    client: TestClient, stream: Callable[[], int], redis_url: str
) -> None:
    first = learn(client, OTHER, "order-42")
    assert (first.status_code, first.json()) == (202, {"accepted": 2})
    assert "Idempotent-Replayed" not in first.headers
    for _ in range(3):
        again = learn(client, OTHER, "order-42")
        assert (again.status_code, again.json()) == (202, {"accepted": 2})
        assert again.headers["Idempotent-Replayed"] == "true"
    assert stream() == 1
    assert learn(client, OTHER, "order-43").status_code == 202  # a new key is a new request
    assert stream() == 2
    plain = redis.Redis.from_url(redis_url)
    assert 590 < plain.ttl(KEYS.idempotency("order-42")) <= 600  # forgotten after the window
    plain.close()


def test_the_same_key_for_other_examples_is_409(
    client: TestClient, stream: Callable[[], int]
) -> None:
    assert learn(client, LEARN, "k-1").status_code == 202
    reply = learn(client, OTHER, "k-1")
    assert reply.status_code == 409
    assert reply.json()["detail"] == (
        "Idempotency-Key 'k-1' was used in the last 600s for a request with other examples; "
        "use a new key for a new request"
    )
    # The same examples, spaced and typed differently, are the same request.
    same = b'{ "label": 1,  "features": {"site": "news", "hour": 3} }'
    headers = {"Idempotency-Key": "k-1", "content-type": "application/json"}
    assert client.post("/learn", content=same, headers=headers).headers["Idempotent-Replayed"]
    assert stream() == 1


@pytest.mark.parametrize("key", ["", "two words", "x" * 256, "clé", "a\tb"])
def test_a_malformed_key_is_422(client: TestClient, stream: Callable[[], int], key: str) -> None:
    reply = client.post("/learn", json=LEARN, headers={"Idempotency-Key": key.encode()})
    assert reply.status_code == 422, reply.text
    assert reply.json()["errors"] == [
        {
            "field": "Idempotency-Key",
            "message": "must be 1-255 characters of A-Z a-z 0-9 and . _ : + / = ~ - (a UUID fits)",
        }
    ]
    assert stream() == 0


def stalled_learn(client: TestClient, server: RedisServer, key: str | None) -> float:
    """POST /learn while Redis is frozen (SIGSTOP); its status must be 503; the seconds it
    took. Redis resumes afterwards and runs whatever it had received."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        reply = learn(client, LEARN, key)
        took = time.monotonic() - started
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert reply.status_code == 503, reply.text
    assert "may have been accepted" in reply.json()["detail"]
    assert "same Idempotency-Key" in reply.json()["detail"]
    return took


def retry_until_accepted(client: TestClient, key: str | None) -> Any:
    deadline = time.monotonic() + 10
    while (reply := learn(client, LEARN, key)).status_code == 503:
        assert time.monotonic() < deadline, reply.text
    return reply


def test_a_stalled_redis_never_doubles_a_retried_request(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server(persist=False)
    settings = Settings(redis_url=server.url, state_buckets=64, redis_timeout_s=TIMEOUT_S, **AUTH)
    plain = redis.Redis.from_url(server.url)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        assert learn(client, LEARN, "warm-up").status_code == 202  # loads the script
        # With a key: the 503 came within the timeout, Redis ran the script when it resumed,
        # and the retry is acknowledged as a replay instead of appended again.
        assert stalled_learn(client, server, "click-1") < TIMEOUT_S + 1.0
        retry = retry_until_accepted(client, "click-1")
        assert (retry.status_code, retry.json()) == (202, {"accepted": 1})
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert plain.xlen(KEYS.stream) == 2
        # Without a key, the same sequence learns the example twice: why the key exists.
        assert stalled_learn(client, server, None) < TIMEOUT_S + 1.0
        assert retry_until_accepted(client, None).status_code == 202
        assert plain.xlen(KEYS.stream) == 4
    plain.close()
