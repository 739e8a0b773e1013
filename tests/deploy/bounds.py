"""Traffic that takes the test's API to each bound of issue 33 (docs/limits.md).

The dashboard's Limits row reads counters of what was dropped or refused at a bound; a counter
with labels has a series only once it counted something, so the test's API runs with bounds
small enough to reach in a few requests, and this traffic reaches each of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import redis

from online_ctr.admin import ModelsAdmin
from online_ctr.challengers import set_policy, sweep, sweep_configs
from online_ctr.config.settings import Settings
from online_ctr.store.model_config import ModelConfig, PolicyBody
from online_ctr.wiring import redis_client

#: Idempotency records and pending impressions the test's API holds at most.
MOST = 5
#: The test's API settings: each bound small enough to reach in a few requests.
SMALL_BOUNDS = {
    "OCTR_MAX_IDEMPOTENCY_KEYS": str(MOST),
    "OCTR_MAX_PENDING_IMPRESSIONS": str(MOST),
    "OCTR_NAME_TABLE_BYTES": str(1 << 20),
    "OCTR_MAX_HEADER_BYTES": "1024",
    # The own model records its feature names, at most MOST: the new names refused past it.
    "OCTR_FEATURE_NAMES": "true",
    "OCTR_FEATURE_NAMES_MAX": str(MOST),
}
#: Joins on (API and workers alike, as in the compose stack), so /predict logs impressions;
#: longer than the test, so none is swept while it runs.
JOINS = {"OCTR_JOIN_WINDOW_S": "3600"}
#: The test Redis's memory limit, as the compose stack sets one (REDIS_MAXMEMORY).
REDIS_MAXMEMORY = 256 << 20
#: New feature names per /predict, and requests: 10,000 names of ~110 bytes, each counted
#: with its cache entry (~250 bytes), several times the 1 MiB budget.
NAMES_PER_REQUEST = 1000
NAME_REQUESTS = 10

#: What holds in Prometheus once each bound was reached, as it scraped the API.
REACHED = {
    "idempotency records at their bound": f"online_ctr_idempotency_keys == {MOST}",
    "idempotency records dropped": "online_ctr_idempotency_keys_evicted_total > 0",
    "impressions not logged": 'online_ctr_unlogged_impressions_total{reason="limit"} > 0',
    "pending impressions at their bound": f"online_ctr_pending_impressions == {MOST}",
    "name tables emptied": "online_ctr_name_table_resets_total > 0",
    "feature names refused": "online_ctr_feature_names_refused_total > 0",
    "a head too large refused": 'online_ctr_http_refusals_total{reason="header_bytes"} > 0',
    "learn refused at Redis's limit": (
        'online_ctr_redis_memory_refusals_total{refused="learn"} > 0'
    ),
}


def drive_to_the_bounds(api: httpx.Client, redis_url: str) -> None:
    """Reach every bound once: the counters of the Limits row then have their series."""
    challengers(api, redis_url)
    lean_model(api, redis_url)
    repeatable_learns(api, 2 * MOST)
    predictions(api, 2 * MOST)
    new_names(api)
    oversized_head(api)
    learn_at_redis_limit(api, redis_url)


def challengers(api: httpx.Client, redis_url: str) -> None:
    """A group of two models with a promotion policy, and feedback for it: the workers'
    promoter then has its series (the Champion and challengers row)."""

    async def create(admin: ModelsAdmin) -> None:
        await sweep(admin, sweep_configs("promo", ModelConfig(), {"alpha": [0.05, 0.1]}))
        await set_policy(admin, "promo", PolicyBody())

    with_admin(redis_url, create)
    feed(api, "promo")


def lean_model(api: httpx.Client, redis_url: str) -> None:
    """A model admitting features at their second occurrence, expiring those untouched for
    5 examples and sampling non-clicks, and feedback for it: its learner then has the
    admission and expiry series (the Lean models row)."""
    config = ModelConfig(admission="bloom:2", negative_rate=0.5, expire_after=5)

    async def create(admin: ModelsAdmin) -> None:
        await admin.create("lean", config)

    with_admin(redis_url, create)
    feed(api, "lean")


def with_admin(redis_url: str, change: Callable[[ModelsAdmin], Awaitable[None]]) -> None:
    """Run ``change`` with the registry's admin, as ``online-ctr models`` does."""
    settings = Settings(redis_url=redis_url, state_buckets=64, state_shards=8)

    async def run() -> None:
        client = redis_client(settings)
        try:
            await change(ModelsAdmin(client, settings))
        finally:
            await client.aclose()

    asyncio.run(run())


def feed(api: httpx.Client, model: str) -> None:
    """Twenty labelled examples for ``model`` (or group)."""
    for number in range(20):
        body = {"features": {"site": "news", "n": float(number)}, "label": number % 2}
        answer = api.post("/learn", json=body, params={"model": model})
        assert answer.status_code == 202, answer.text


def repeatable_learns(api: httpx.Client, count: int) -> None:
    """/learn with a new Idempotency-Key each: past the bound, the oldest records go."""
    for number in range(count):
        body = {"features": {"site": "news"}, "label": number % 2}
        answer = api.post("/learn", json=body, headers={"Idempotency-Key": f"bound-{number}"})
        assert answer.status_code == 202, answer.text


def predictions(api: httpx.Client, count: int) -> None:
    """Single /predicts, each logging an impression until the pending bound."""
    for number in range(count):
        answer = api.post("/predict", json={"features": {"site": "news", "n": float(number)}})
        assert answer.status_code == 200, answer.text


def new_names(api: httpx.Client) -> None:
    """Batches of feature names never seen, each ~120 bytes: the name tables outgrow their
    budget and the largest is emptied."""
    padding = "x" * 100
    for request in range(NAME_REQUESTS):
        features: dict[str, Any] = {
            f"{padding}-{request}-{number}": 1.0 for number in range(NAMES_PER_REQUEST)
        }
        answer = api.post("/predict", json={"features": features})
        assert answer.status_code == 200, answer.text


def oversized_head(api: httpx.Client) -> None:
    """One request whose headers exceed OCTR_MAX_HEADER_BYTES: a 431."""
    padding = "y" * (2 * int(SMALL_BOUNDS["OCTR_MAX_HEADER_BYTES"]))
    answer = api.get("/healthz", headers={"X-Padding": padding})
    assert answer.status_code == 431, answer.text


def learn_at_redis_limit(api: httpx.Client, redis_url: str) -> None:
    """A /learn while Redis holds more than its limit: a 503; the limit is then restored."""
    client: Any = redis.Redis.from_url(redis_url)
    try:
        client.config_set("maxmemory", 1)
        answer = api.post("/learn", json={"features": {"site": "news"}, "label": 1})
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"], answer.headers
    finally:
        client.config_set("maxmemory", REDIS_MAXMEMORY)
        client.close()
