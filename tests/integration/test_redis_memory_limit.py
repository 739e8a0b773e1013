"""The real API and worker processes at Redis's memory limit (``maxmemory``, ``noeviction``):
/learn answers 503 with Retry-After and says why, /predict still answers, /readyz and the
metrics say why, the worker waits without crashing, and once the limit is raised every
accepted example is learned exactly once (the model's step ``t`` equals the examples accepted,
none dead-lettered, none left counted as a failed delivery)."""

from __future__ import annotations

import itertools
import re
import signal
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import redis

from online_ctr.cli.embedded import RedisServer
from online_ctr.store.keys import ModelKeys
from tests.integration.conftest import Service, wait_until

KEYS = ModelKeys("default")
#: Examples per /learn: each brings a feature never seen, so the model's state grows too.
PER_REQUEST = 200
_COUNTER = itertools.count()


def learn_body() -> dict[str, object]:
    return {
        "examples": [
            {"features": {"user": f"u{i}", "site": f"s{i % 10}"}, "label": i % 2}
            for i in (next(_COUNTER) for _ in range(PER_REQUEST))
        ]
    }


def metric(url: str, name: str) -> float:
    """The value of one series in a /metrics page (0 if absent)."""
    text = httpx.get(url).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(found[1]) if found else 0.0


def learned(client: redis.Redis) -> int:
    return int(client.hget(KEYS.meta, "t") or 0)


@pytest.fixture
def limited_redis(
    make_redis_server: Callable[..., RedisServer],
) -> Iterator[tuple[str, redis.Redis]]:
    """A Redis of its own whose maxmemory the test sets; lifted again before teardown."""
    url = make_redis_server(persist=False).url
    client = redis.Redis.from_url(url)
    try:
        yield url, client
    finally:
        client.config_set("maxmemory", 0)
        client.close()


def fill_to_the_limit(service: Service, client: redis.Redis) -> tuple[int, httpx.Response]:
    """Post /learn, with the limit just above what Redis holds, until Redis refuses one; the
    examples accepted, and the refusal."""
    accepted = 0
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + 1024 * 1024)
    for _ in range(2000):
        answer = httpx.post(f"{service.api_url}/learn", json=learn_body(), timeout=10)
        if answer.status_code != 202:
            return accepted, answer
        accepted += answer.json()["accepted"]
    raise AssertionError("Redis never reached its limit")


def test_the_service_at_the_memory_limit_and_after(
    limited_redis: tuple[str, redis.Redis], start_service: Callable[..., Service]
) -> None:
    url, client = limited_redis
    service = start_service(url)
    worker = service.processes["worker0"]
    for _ in range(10):  # learned while the test goes on
        assert httpx.post(f"{service.api_url}/learn", json=learn_body()).status_code == 202
    # Paused while Redis fills (SIGSTOP), so that it meets the limit with examples to learn.
    worker.send_signal(signal.SIGSTOP)
    try:
        filled, refused = fill_to_the_limit(service, client)
    finally:
        worker.send_signal(signal.SIGCONT)
    accepted = 10 * PER_REQUEST + filled
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "1"
    assert "Redis is at its memory limit" in refused.json()["detail"]
    assert "OCTR_REDIS_MAXMEMORY" in refused.json()["detail"]
    # Held there: the limit below what Redis holds, so the worker's last commits cannot make
    # room by themselves while the test looks.
    held = int(client.info("memory")["used_memory"]) // 2
    client.config_set("maxmemory", held)

    again = httpx.post(
        f"{service.api_url}/learn", json=learn_body(), headers={"Idempotency-Key": "k1"}
    )
    assert again.status_code == 503 and "memory limit" in again.json()["detail"]
    predict = httpx.post(f"{service.api_url}/predict", json={"features": {"user": "u1"}})
    assert predict.status_code == 200 and 0 < predict.json()["probability"] < 1
    ready = httpx.get(f"{service.api_url}/readyz")
    assert ready.status_code == 503
    reason = ready.json()["detail"]
    assert "Redis is at its memory limit" in reason and "/predict still answers" in reason
    assert "OCTR_REDIS_MAXMEMORY" in reason
    api_metrics = f"{service.api_url}/metrics"
    assert metric(api_metrics, 'online_ctr_redis_memory_refusals_total{refused="learn"}') >= 2
    assert metric(api_metrics, "online_ctr_redis_maxmemory_bytes") == held
    assert metric(api_metrics, "online_ctr_redis_memory_bytes") >= held

    worker_metrics = service.worker_metrics_urls[0]
    commit_refusals = 'online_ctr_redis_memory_refusals_total{refused="commit"}'
    wait_until(lambda: metric(worker_metrics, commit_refusals) >= 3, what="worker refusals")
    waiting = accepted - learned(client)
    assert waiting > 0, "the worker had nothing left to learn at the limit"
    assert worker.poll() is None

    client.config_set("maxmemory", 0)  # room again: raised (no limit)
    raised = time.monotonic()
    wait_until(lambda: learned(client) == accepted, what=f"{accepted} examples learned")
    resumed_s = time.monotonic() - raised
    assert resumed_s < 30
    wait_until(lambda: httpx.get(f"{service.api_url}/readyz").status_code == 200, what="ready")
    assert httpx.post(f"{service.api_url}/learn", json=learn_body()).status_code == 202
    accepted += PER_REQUEST
    wait_until(lambda: learned(client) == accepted, what="the last request learned")

    assert client.xlen(KEYS.dead) == 0
    assert client.hlen(KEYS.failures) == 0
    assert client.xlen(KEYS.stream) == 0
    log = (service.log_dir / "worker0.log").read_text()
    assert log.count("Redis is at its memory limit and refused") == 1, log[-3000:]
    assert "learning resumes after" in log
    assert "Traceback" not in log
    print(
        f"at the limit: {waiting} of {accepted} examples waiting; learned {resumed_s:.2f} s after"
    )
