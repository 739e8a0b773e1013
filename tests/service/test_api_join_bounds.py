"""The bound of impressions waiting for labels (OCTR_MAX_PENDING_IMPRESSIONS): at it /predict
still answers every score, the requests that do not fit are not logged (their prediction ids
null, a label for them unknown), counted, and room returns as windows are labelled or swept.
Redis refusing the log at its memory limit is answered the same way. Real Redis, real app."""

from __future__ import annotations

import asyncio
import math
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.join_policy import JoinPolicy
from online_ctr.config.settings import Settings
from online_ctr.store.impressions import Impressions, Swept
from online_ctr.store.keys import FeedbackKeys, ModelKeys
from service.app import create_app
from tests.service.keys import AUTH, HEADERS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

KEYS = ModelKeys("default").feedback
FEATURES = {"site": "news", "hour": 3.0}
MOST = 5
MakeServer = Callable[..., RedisServer]


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        state_buckets=64,
        join_window_s=60,
        max_pending_impressions=MOST,
        **AUTH,
    )


def batch(client: TestClient, n: int, ids: list[str] | None = None, **params: str) -> Any:
    """/predict of ``n`` examples (with the caller's ``ids``, if given): its 200 answer."""
    items: list[dict[str, Any]] = [{"features": {**FEATURES, "n": float(j)}} for j in range(n)]
    for item, prediction_id in zip(items, ids or [], strict=False):
        item["prediction_id"] = prediction_id
    reply = client.post("/predict", json={"examples": items}, params=params)
    assert reply.status_code == 200, reply.text
    predictions = reply.json()["predictions"]
    assert len(predictions) == n
    assert all(0 < p["probability"] < 1 and math.isfinite(p["logit"]) for p in predictions)
    return predictions


def ids_of(predictions: list[dict[str, Any]]) -> list[str | None]:
    return [p["prediction_id"] for p in predictions]


def impression_keys(plain: Any, keys: FeedbackKeys = KEYS) -> set[bytes]:
    return set(plain.scan_iter(match=keys.impression("*"), count=1000))


def unlogged(registry: CollectorRegistry, reason: str, model: str = "default") -> float:
    labels = {"model": model, "reason": reason}
    return registry.get_sample_value("online_ctr_unlogged_impressions_total", labels) or 0.0


def pending_gauge(client: TestClient, registry: CollectorRegistry) -> float | None:
    assert client.get("/metrics").status_code == 200  # refreshes the gauges
    return registry.get_sample_value("online_ctr_pending_impressions", {"model": "default"})


def sweep_all(redis_url: str, plain: Any) -> Swept:
    """Close every open window now (deadline 0), then run the sweep once, as a worker would."""
    for member in plain.zrange(KEYS.pending, 0, -1):
        plain.zadd(KEYS.pending, {member: 0}, xx=True)

    async def sweep() -> Swept:
        client = aioredis.Redis.from_url(redis_url)
        swept = await Impressions(client, KEYS, [], JoinPolicy(60, "drop")).sweep()
        await client.aclose()
        return swept

    return asyncio.run(sweep())


def test_at_the_bound_predict_answers_and_logs_nothing_beyond_it(
    client: TestClient, plain: Any, registry: CollectorRegistry
) -> None:
    first = ids_of(batch(client, 3))
    assert all(isinstance(i, str) for i in first)
    # 3 pending + 3 > 5: scored, not logged (a plain body, read by the compiled scan).
    assert ids_of(batch(client, 3)) == [None] * 3
    # One more fits, with the caller's id (a body validated by pydantic)...
    single = client.post("/predict", json={"features": FEATURES, "prediction_id": "mine"})
    assert (single.status_code, single.json()["prediction_id"]) == (200, "mine")
    # ... and a request of two does not: whole requests only, the caller's ids not logged.
    assert ids_of(batch(client, 2, ["c-1", "c-2"])) == [None, None]
    assert plain.zcard(KEYS.pending) == 4
    assert len(impression_keys(plain)) == 4
    assert not plain.exists(KEYS.impression("c-1"), KEYS.impression("c-2"))
    # A label for an unlogged prediction is unknown, as for any id never logged.
    unknown = client.post("/learn", json={"prediction_id": "c-1", "label": 1})
    assert unknown.status_code == 404 and "unknown" in unknown.json()["detail"]
    assert unlogged(registry, "limit") == 5
    assert unlogged(registry, "redis_memory") == 0
    assert pending_gauge(client, registry) == 4
    # The pending set full: every request of a pass is scored, none logged.
    client.post("/predict", json={"features": FEATURES})
    assert ids_of(batch(client, 1)) == [None]
    assert plain.zcard(KEYS.pending) == MOST
    assert unlogged(registry, "limit") == 6
    assert "null when its impression was not logged" in str(client.app.openapi())  # type: ignore[attr-defined]


def test_room_returns_as_windows_are_labelled_and_swept(
    client: TestClient, plain: Any, redis_url: str, registry: CollectorRegistry
) -> None:
    logged = ids_of(batch(client, MOST))
    assert ids_of(batch(client, 1)) == [None]
    # A label frees its place at once (its tombstone is not pending)...
    assert client.post("/learn", json={"prediction_id": logged[0], "label": 1}).status_code == 202
    assert isinstance(ids_of(batch(client, 1))[0], str)
    assert ids_of(batch(client, 1)) == [None]
    assert pending_gauge(client, registry) == MOST
    # ... and the sweep frees the rest when their windows close.
    swept = sweep_all(redis_url, plain)
    assert (swept.taken, swept.closed) == (MOST, MOST)
    assert pending_gauge(client, registry) == 0
    # Tombstones stay one window, without the example: the model and the state only.
    tombstones = [plain.hgetall(key) for key in impression_keys(plain)]
    assert len(tombstones) == MOST + 1
    assert {tuple(sorted(t)) for t in tombstones} == {(b"m", b"s")}
    assert all(0 < plain.pttl(key) <= 60_000 for key in impression_keys(plain))
    assert all(isinstance(i, str) for i in ids_of(batch(client, MOST)))
    assert plain.zcard(KEYS.pending) == MOST
    assert unlogged(registry, "limit") == 2


def test_a_tombstone_is_a_small_hash_whatever_it_held(
    client: TestClient, plain: Any, redis_url: str
) -> None:
    # A wide example's impression is a hashtable (its entry is over Redis's 64-byte listpack
    # value); its tombstone, labelled or swept, is written anew: a listpack of {m, s}.
    wide = {f"f{k}": f"value-{k}" for k in range(40)}
    for prediction_id in ("labelled", "swept"):
        client.post("/predict", json={"features": wide, "prediction_id": prediction_id})
        assert plain.object("encoding", KEYS.impression(prediction_id)) == b"hashtable"
    assert client.post("/learn", json={"prediction_id": "labelled", "label": 1}).status_code == 202
    assert sweep_all(redis_url, plain).closed == 1
    for prediction_id, state in (("labelled", b"labelled"), ("swept", b"dropped")):
        key = KEYS.impression(prediction_id)
        assert plain.hgetall(key) == {b"m": b"default", b"s": state}
        assert plain.object("encoding", key) == b"listpack"
        assert plain.memory_usage(key) < 150  # a hashtable of {m, s}: over 200


def test_a_group_shares_one_bound(client: TestClient, plain: Any) -> None:
    for name in ("a", "b"):
        created = client.put(
            f"/models/{name}", json={"rule": "ftrl", "group": "ctr", "join_window_s": 60}
        )
        assert created.status_code == 201, created.text
    group = FeedbackKeys.of("a", "ctr")
    assert all(isinstance(i, str) for i in ids_of(batch(client, 3, model="a")))
    assert ids_of(batch(client, 3, model="b")) == [None] * 3  # 3 + 3 > 5 in the group's set
    assert all(isinstance(i, str) for i in ids_of(batch(client, 2, model="b")))
    assert plain.zcard(group.pending) == MOST
    assert len(impression_keys(plain, group)) == MOST


def test_redis_at_its_memory_limit_is_answered_unlogged(make_redis_server: MakeServer) -> None:
    server = make_redis_server(persist=False)
    plain: Any = redis.Redis.from_url(server.url)
    registry = CollectorRegistry()
    settings = Settings(
        redis_url=server.url, state_buckets=64, join_window_s=60, redis_timeout_s=2, **AUTH
    )
    with TestClient(create_app(settings, registry), headers=HEADERS) as client:
        assert all(isinstance(i, str) for i in ids_of(batch(client, 10)))  # model created
        used = int(plain.info("memory")["used_memory"])
        plain.config_set("maxmemory-policy", "noeviction")
        plain.config_set("maxmemory", used + 512 * 1024)
        try:
            # Batches of 200 (~90 KB logged each) until Redis refuses one: a pass is logged
            # whole or refused at its first write, never half.
            answers = [ids_of(batch(client, 200)) for _ in range(40)]
            refused = [ids for ids in answers if ids == [None] * 200]
            assert refused and answers[0] != [None] * 200
            assert all(ids == [None] * 200 or None not in ids for ids in answers)
            held = plain.zcard(KEYS.pending)
            assert held == 10 + 200 * (len(answers) - len(refused))
            assert len(impression_keys(plain)) == held
            assert unlogged(registry, "redis_memory") == 200 * len(refused)
            assert unlogged(registry, "limit") == 0
            memory = {"refused": "impressions"}
            value = registry.get_sample_value("online_ctr_redis_memory_refusals_total", memory)
            assert value == len(refused)
        finally:
            plain.config_set("maxmemory", 0)
        # Room again: logged again.
        assert all(isinstance(i, str) for i in ids_of(batch(client, 200)))
    plain.close()
