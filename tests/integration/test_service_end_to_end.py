"""The real API and worker processes, end to end, including a Redis outage."""

from __future__ import annotations

import itertools
import signal
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule
from testkit.paths import CRITEO
from tests.integration.conftest import Service, wait_until

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 400))


def learn(service: Service, rows: list[tuple[dict[str, Any], int]]) -> httpx.Response:
    body = {"examples": [{"features": x, "label": y} for x, y in rows]}
    return httpx.post(f"{service.api_url}/learn", json=body, timeout=5)


def model(service: Service) -> dict[str, Any]:
    reply = httpx.get(f"{service.api_url}/models/default", timeout=5)
    reply.raise_for_status()
    info: dict[str, Any] = reply.json()
    return info


def occurrences(rows: list[tuple[dict[str, Any], int]]) -> int:
    return FeatureHasher().batch([x for x, _ in rows]).occurrences()


def worker_sample(url: str, name: str) -> float:
    for family in text_string_to_metric_families(httpx.get(url, timeout=5).text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not exported at {url}")


def test_learn_then_predict_reflects_it(redis_url: str, start_service: Any) -> None:
    service = start_service(redis_url, OCTR_BATCH_SIZE="8")
    features = ROWS[0][0]
    before = httpx.post(f"{service.api_url}/predict", json={"features": features}).json()
    assert before["probability"] == 0.5 and before["model"] == "default"

    for start in range(0, 200, 20):  # batch shape, then single shape
        assert learn(service, ROWS[start : start + 20]).json() == {"accepted": 20}
    for x, y in ROWS[200:220]:
        reply = httpx.post(f"{service.api_url}/learn", json={"features": x, "label": y})
        assert (reply.status_code, reply.json()) == (202, {"accepted": 1})
    wait_until(lambda: model(service)["global_step"] == 220, what="the worker to learn 220")

    single = httpx.post(f"{service.api_url}/predict", json={"features": features}).json()
    batch = httpx.post(
        f"{service.api_url}/predict",
        json={"examples": [{"features": x} for x, _ in ROWS[:3]]},
    ).json()
    assert single["probability"] != 0.5
    assert batch["predictions"][0] == {
        "probability": single["probability"],
        "logit": single["logit"],
    }
    info = model(service)
    assert info["stream_lag"] == 0 and info["progressive_logloss"] > 0
    worker_metrics = service.worker_metrics_urls[0]
    labels = "online_ctr_learned_examples_total"
    assert worker_sample(worker_metrics, labels) == 220
    assert worker_sample(worker_metrics, "online_ctr_nonzero_weights") == info["nonzero_weights"]

    worker = service.processes["worker0"]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(15) == 0


def test_redis_outage_gives_503_then_recovers_and_loses_nothing(
    make_redis_server: Any, start_service: Any
) -> None:
    redis: RedisServer = make_redis_server(persist=True)
    service = start_service(redis.url, workers=2, OCTR_BATCH_SIZE="16")
    accepted: list[tuple[dict[str, Any], int]] = []
    for start in range(0, 100, 10):
        assert learn(service, ROWS[start : start + 10]).status_code == 202
        accepted += ROWS[start : start + 10]

    redis.stop()
    for path, body in (
        ("/learn", {"features": ROWS[0][0], "label": 1}),
        ("/predict", {"features": ROWS[0][0]}),
    ):
        reply = httpx.post(f"{service.api_url}{path}", json=body, timeout=10)
        assert reply.status_code == 503, reply.text
        assert int(reply.headers["Retry-After"]) >= 1
    assert httpx.get(f"{service.api_url}/readyz", timeout=10).status_code == 503

    redis.start()
    wait_until(lambda: learn(service, ROWS[100:110]).status_code == 202, what="recovery")
    accepted += ROWS[100:110]
    for start in range(110, 200, 10):
        assert learn(service, ROWS[start : start + 10]).status_code == 202
        accepted += ROWS[start : start + 10]
    wait_until(
        lambda: model(service)["global_step"] >= len(accepted),
        what=f"the workers to catch up\n{service.logs()}",
    )
    info = model(service)
    # Exactly once: the step counts each accepted example once, and the per-feature
    # occurrence counts add up to what was sent (checked through the worker metrics too).
    assert info["global_step"] == len(accepted)
    assert info["stream_lag"] == 0 and info["dead_letters"] == 0

    def learned() -> float:
        return sum(
            worker_sample(url, "online_ctr_learned_examples_total")
            for url in service.worker_metrics_urls
        )

    # A worker counts a group once its commit's reply is back, a moment after the step moved
    # in Redis: wait for the count as for the step (seen 190 of 200 under load).
    wait_until(lambda: learned() >= len(accepted), what=f"the workers' count\n{service.logs()}")
    assert learned() == len(accepted)


def test_a_compact_service_predicts_what_the_compact_replay_learned(
    redis_url: str, start_service: Any
) -> None:
    rows = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))
    service = start_service(redis_url, OCTR_STATE_ENCODING="compact", OCTR_BATCH_SIZE="512")
    for start in range(0, len(rows), 250):
        assert learn(service, rows[start : start + 250]).status_code == 202
    wait_until(lambda: model(service)["global_step"] == len(rows), what="the worker to learn")

    rule = get_rule("ftrl")
    replayed = InMemoryModel(rule, rule.params(), encoding="compact")
    result = replay(rows, replayed, FeatureHasher(), batch_size=1)
    info = model(service)
    assert info["nonzero_weights"] == result.nonzero_weights
    assert info["features_tracked"] == result.features_tracked
    # Redis sums the log losses in its own order (see tests/workers/test_worker_matches_replay).
    assert info["progressive_logloss"] == pytest.approx(result.logloss, rel=1e-12)
    hasher = FeatureHasher()
    for x, _ in rows[:50]:
        served = httpx.post(f"{service.api_url}/predict", json={"features": x}).json()
        assert served["probability"] == replayed.predict(hasher.batch([x]))[0]
    # Compact values in Redis: 4 bytes each.
    client = Redis.from_url(redis_url)
    key = next(client.scan_iter(match="octr:{default/*}:b:*", count=1000))
    assert {len(value) for value in client.hgetall(key).values()} == {4}
    client.close()
