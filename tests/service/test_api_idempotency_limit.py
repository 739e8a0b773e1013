"""/learn at OCTR_MAX_IDEMPOTENCY_KEYS: the oldest records are dropped first (a retry of a
dropped key is learned again, of a kept one replayed), on the append and join paths and for a
group, and /metrics shows the records held and those dropped. The real app on a real Redis."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.store.keys import ModelKeys
from tests.service.keys import AUTH

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

KEYS = ModelKeys("default")
MOST = 3


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        state_buckets=64,
        join_window_s=60,
        idempotency_window_s=600,
        max_idempotency_keys=MOST,
        **AUTH,
    )


def learn(client: TestClient, key: str, site: str = "news", model: str | None = None) -> Any:
    body = {"features": {"site": site}, "label": 1}
    params = {"model": model} if model else {}
    return client.post("/learn", json=body, params=params, headers={"Idempotency-Key": key})


def gauges(client: TestClient, registry: CollectorRegistry, model: str) -> tuple[Any, Any]:
    """The model's records held and dropped, as /metrics shows them (it refreshes first)."""
    assert client.get("/metrics").status_code == 200
    labels = {"model": model}
    return (
        registry.get_sample_value("online_ctr_idempotency_keys", labels),
        registry.get_sample_value("online_ctr_idempotency_keys_evicted_total", labels),
    )


def test_learn_keeps_the_newest_keys_and_a_dropped_one_is_learned_again(
    client: TestClient, registry: CollectorRegistry, plain: Any
) -> None:
    for i in range(5):
        assert learn(client, f"order-{i}").status_code == 202
    assert gauges(client, registry, "default") == (MOST, 2)
    assert plain.xlen(KEYS.stream) == 5
    kept = learn(client, "order-4")
    assert kept.headers.get("Idempotent-Replayed") == "true"
    dropped = learn(client, "order-0")  # shortened window: a new request now
    assert (dropped.status_code, dropped.json()) == (202, {"accepted": 1})
    assert "Idempotent-Replayed" not in dropped.headers
    assert plain.xlen(KEYS.stream) == 6
    assert gauges(client, registry, "default") == (MOST, 3)
    held = {k.decode() for k in plain.scan_iter(match=KEYS.idempotency("*"))}
    assert held == {KEYS.idempotency(k) for k in ("order-3", "order-4", "order-0")}


def test_labels_by_prediction_id_share_the_bound(
    client: TestClient, registry: CollectorRegistry
) -> None:
    assert learn(client, "plain-0").status_code == 202
    ids = [
        client.post("/predict", json={"features": {"site": f"s{i}"}}).json()["prediction_id"]
        for i in range(4)
    ]
    for i, prediction_id in enumerate(ids):
        body = {"prediction_id": prediction_id, "label": 1}
        reply = client.post("/learn", json=body, headers={"Idempotency-Key": f"label-{i}"})
        assert reply.status_code == 202, reply.text
    assert gauges(client, registry, "default") == (MOST, 2)
    again = client.post(
        "/learn",
        json={"prediction_id": ids[3], "label": 1},
        headers={"Idempotency-Key": "label-3"},
    )
    assert again.headers.get("Idempotent-Replayed") == "true"


def test_a_group_holds_the_limit_once_for_all_its_models(
    client: TestClient, registry: CollectorRegistry
) -> None:
    client.put("/models/a", json={"rule": "ftrl", "group": "ctr"})
    client.put("/models/b", json={"rule": "rda", "group": "ctr"})
    for i in range(5):
        assert learn(client, f"g-{i}", model="ctr").status_code == 202
    # Both show the group's records; the drops are counted once, by the serving model.
    assert gauges(client, registry, "a") == (MOST, 2)
    assert gauges(client, registry, "b") == (MOST, 0)
    assert gauges(client, registry, "default") == (0, 0)  # its own tag: untouched
