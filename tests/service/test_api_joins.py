"""Labels that arrive later, by prediction id: /predict logs each impression, /learn joins its
label while the window is open, and the sweep closes windows (called here directly, after the
test closed them by rewriting their deadlines: no test sleeps)."""

from __future__ import annotations

import asyncio
import struct
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.join_policy import JoinPolicy
from online_ctr.config.settings import Settings
from online_ctr.store.codec import LABEL_OFFSET, decode_entry
from online_ctr.store.impressions import Impressions, Swept
from online_ctr.store.keys import ModelKeys
from service.app import create_app
from tests.service.keys import AUTH, HEADERS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

KEYS = ModelKeys("default")
FEATURES = {"site": "news", "hour": 3.0}
Sweep = Callable[..., Swept]


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, join_window_s=1, idempotency_window_s=600, **AUTH
    )


@pytest.fixture
def close_and_sweep(redis_url: str, plain: Any) -> Sweep:
    """Close every open window now (deadline 0), then run the sweep once."""

    def run(*ids: str) -> Swept:
        """Close the windows of ``ids`` (all if none given), then sweep."""
        for member in ids or plain.zrange(KEYS.feedback.pending, 0, -1):
            plain.zadd(KEYS.feedback.pending, {member: 0}, xx=True)

        async def sweep() -> Swept:
            client = aioredis.Redis.from_url(redis_url)
            impressions = Impressions(client, KEYS.feedback, [KEYS.stream], JoinPolicy(1))
            swept = await impressions.sweep()
            await client.aclose()
            return swept

        return asyncio.run(sweep())

    return run


def predict(client: TestClient, body: dict[str, Any]) -> Any:
    return client.post("/predict", json=body)


def label(client: TestClient, prediction_id: str, value: int = 1, key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(
        "/learn", json={"prediction_id": prediction_id, "label": value}, headers=headers
    )


def entries(plain: Any) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in plain.xrange(KEYS.stream)]


def test_every_prediction_gets_an_id_and_its_impression_is_logged(
    client: TestClient, plain: Any
) -> None:
    single = predict(client, {"features": FEATURES}).json()
    batch = predict(client, {"examples": [{"features": FEATURES}] * 3}).json()
    ids = [single["prediction_id"], *(p["prediction_id"] for p in batch["predictions"])]
    assert len(set(ids)) == 4 and all(len(i) == 22 for i in ids)
    impression = plain.hgetall(KEYS.feedback.impression(ids[0]))
    assert impression[b"s"] == b"pending" and impression[b"m"] == b"default"
    assert struct.unpack("<d", impression[b"p"])[0] == single["probability"]
    assert decode_entry(impression[b"b"]).labels.tolist() == [0.0]
    assert plain.zcard(KEYS.feedback.pending) == 4
    assert 1000 < plain.pttl(KEYS.feedback.impression(ids[0])) <= 2000  # twice the window


def test_a_label_by_id_is_learned_with_the_served_example(client: TestClient, plain: Any) -> None:
    served = predict(client, {"features": FEATURES, "prediction_id": "imp-1"}).json()
    assert served["prediction_id"] == "imp-1"
    reply = label(client, "imp-1")
    assert (reply.status_code, reply.json()) == (202, {"accepted": 1})
    (entry,) = entries(plain)
    assert entry[b"i"] == b"imp-1" and entry[b"m"] == b"default"
    assert entry[b"b"][LABEL_OFFSET] == 1
    assert struct.unpack("<d", entry[b"p"])[0] == served["probability"]
    tombstone = plain.hgetall(KEYS.feedback.impression("imp-1"))
    assert tombstone == {b"m": b"default", b"s": b"labelled"}
    assert plain.zcard(KEYS.feedback.pending) == 0


def test_unknown_repeated_and_late_labels_are_refused(
    client: TestClient, plain: Any, close_and_sweep: Sweep
) -> None:
    predict(client, {"examples": [{"features": FEATURES, "prediction_id": i} for i in "ab"]})
    unknown = label(client, "never-served")
    assert unknown.status_code == 404
    assert "'never-served' is unknown" in unknown.json()["detail"]
    assert label(client, "a").status_code == 202
    repeated = label(client, "a", 0)
    assert repeated.status_code == 409
    assert "already labelled" in repeated.json()["detail"]
    assert close_and_sweep() == Swept(taken=1, closed=1, negatives=1, expired=0)
    late = label(client, "b")
    assert late.status_code == 409
    assert late.json()["detail"] == (
        "prediction 'b' came too late: its window closed without a click and it was learned "
        "as a negative; late labels are counted, not learned"
    )
    learned = [(e[b"i"], e[b"b"][LABEL_OFFSET]) for e in entries(plain)]
    assert learned == [(b"a", 1), (b"b", 0)]  # each impression exactly once
    metrics = client.get("/metrics").text
    for outcome, count in (("learned", 1), ("unknown", 1), ("repeated", 1), ("late", 1)):
        line = f'online_ctr_joined_labels_total{{model="default",outcome="{outcome}"}} {count}.0'
        assert line in metrics


def test_a_closed_window_not_swept_yet_is_late_too(client: TestClient, plain: Any) -> None:
    predict(client, {"features": FEATURES, "prediction_id": "z"})
    plain.zadd(KEYS.feedback.pending, {"z": 0}, xx=True)
    assert label(client, "z").status_code == 409
    assert entries(plain) == []  # the sweep will learn it as the negative it is


def test_a_batch_answers_per_id(client: TestClient, plain: Any, close_and_sweep: Sweep) -> None:
    predict(client, {"examples": [{"features": FEATURES, "prediction_id": i} for i in "abc"]})
    label(client, "a")
    close_and_sweep("c")  # b stays open
    body = {"examples": [{"prediction_id": i, "label": 1} for i in ("b", "a", "x", "c")]}
    reply = client.post("/learn", json=body)
    assert reply.status_code == 202
    answer = reply.json()
    assert answer["accepted"] == 1
    reasons = [(r["index"], r["prediction_id"], r["reason"]) for r in answer["rejected"]]
    assert reasons == [(1, "a", "repeated"), (2, "x", "unknown"), (3, "c", "late")]
    assert all(r["detail"] for r in answer["rejected"])
    all_learned = client.post("/learn", json={"examples": []})
    assert all_learned.status_code == 422


def test_a_caller_id_used_before_is_409_and_logs_nothing(client: TestClient, plain: Any) -> None:
    assert predict(client, {"features": FEATURES, "prediction_id": "dup"}).status_code == 200
    again = predict(client, {"features": FEATURES, "prediction_id": "dup"})
    assert again.status_code == 409
    assert again.json()["detail"] == (
        "prediction_id 'dup' is already used for a prediction; use a new id per impression"
    )
    body = {"examples": [{"features": FEATURES, "prediction_id": i} for i in ("new", "dup")]}
    batch = predict(client, body)
    assert batch.status_code == 409
    assert "examples[1] 'dup'" in batch.json()["detail"]
    assert not plain.exists(KEYS.feedback.impression("new"))  # nothing of that request
    label(client, "dup")
    assert predict(client, {"features": FEATURES, "prediction_id": "dup"}).status_code == 409


def test_idempotent_join_replays_the_first_answer(client: TestClient, plain: Any) -> None:
    predict(client, {"examples": [{"features": FEATURES, "prediction_id": i} for i in "ab"]})
    body = {"examples": [{"prediction_id": "a", "label": 1}, {"prediction_id": "q", "label": 1}]}
    first = client.post("/learn", json=body, headers={"Idempotency-Key": "k1"})
    again = client.post("/learn", json=body, headers={"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 202
    assert first.json() == again.json() and first.json()["accepted"] == 1
    assert again.headers["Idempotent-Replayed"] == "true"
    assert len(entries(plain)) == 1
    other = client.post(
        "/learn", json={"prediction_id": "b", "label": 1}, headers={"Idempotency-Key": "k1"}
    )
    assert other.status_code == 409 and "Idempotency-Key 'k1'" in other.json()["detail"]
    single = label(client, "b", key="k2")
    replay = label(client, "b", key="k2")
    assert (single.status_code, replay.status_code) == (202, 202)
    assert replay.headers["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prediction_id": "", "label": 1}, "prediction_id"),
        ({"prediction_id": "a b", "label": 1}, "prediction_id"),
        ({"prediction_id": "x" * 129, "label": 1}, "prediction_id"),
        ({"prediction_id": 7, "label": 1}, "prediction_id"),
        ({"prediction_id": "a", "label": 2}, "label"),
        ({"prediction_id": "a"}, "label"),
        ({"prediction_id": "a", "features": FEATURES, "label": 1}, "body"),
    ],
)
def test_invalid_join_labels_are_422(client: TestClient, body: dict[str, Any], field: str) -> None:
    reply = client.post("/learn", json=body)
    assert reply.status_code == 422
    assert reply.json()["errors"][0]["field"] == field


def test_mixing_labels_by_id_with_features_is_422(client: TestClient) -> None:
    body = {"examples": [{"features": FEATURES, "label": 1}, {"prediction_id": "a", "label": 1}]}
    reply = client.post("/learn", json=body)
    assert reply.status_code == 422
    assert reply.json()["errors"] == [
        {
            "field": "examples",
            "message": "mixes labels by 'prediction_id' with examples with 'features': send "
            "each kind in a request of its own",
        }
    ]


def test_invalid_caller_ids_are_422_and_repeated_ones_409(client: TestClient, plain: Any) -> None:
    bad = predict(client, {"features": FEATURES, "prediction_id": "é"})
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "prediction_id"
    # A conflict, as an id an earlier request used: the body itself is as its schema says.
    twice = {"examples": [{"features": FEATURES, "prediction_id": "a"}] * 2}
    reply = predict(client, twice)
    assert reply.status_code == 409
    assert "examples[1] 'a' (as examples[0])" in reply.json()["detail"]
    assert plain.zcard(KEYS.feedback.pending) == 0  # nothing of it was logged


def test_a_model_without_joins_says_how_to_turn_them_on(redis_url: str, plain: Any) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        plain_answer = predict(client, {"features": FEATURES}).json()
        assert "prediction_id" not in plain_answer
        for reply in (
            predict(client, {"features": FEATURES, "prediction_id": "a"}),
            label(client, "a"),
        ):
            assert reply.status_code == 422
            assert "set OCTR_JOIN_WINDOW_S" in reply.json()["detail"]
    assert plain.keys("*imp*") == [] and not plain.exists(KEYS.feedback.pending)


def test_a_clash_refuses_only_its_own_request_of_a_pass(redis_url: str, plain: Any) -> None:
    # Two requests scored in one pass: the one reusing an id logs nothing, the other all.
    async def log() -> list[int]:
        client = aioredis.Redis.from_url(redis_url)
        impressions = Impressions(client, KEYS.feedback, [KEYS.stream], JoinPolicy(60))
        entry = b"x"
        ids = ["a", "b", "c", "a"]  # requests [a, b] and [c, a]
        logged = await impressions.log(ids, [entry] * 4, [0.5] * 4, "default", [2, 2], 10)
        await client.aclose()
        assert logged.unlogged == []
        return logged.clashes

    assert asyncio.run(log()) == [3]
    assert sorted(plain.zrange(KEYS.feedback.pending, 0, -1)) == [b"a", b"b"]
    assert not plain.exists(KEYS.feedback.impression("c"))


def test_an_idempotency_key_of_features_is_not_one_of_labels(client: TestClient) -> None:
    predict(client, {"features": FEATURES, "prediction_id": "a"})
    headers = {"Idempotency-Key": "k"}
    assert (
        client.post("/learn", json={"features": FEATURES, "label": 1}, headers=headers).status_code
        == 202
    )
    assert label(client, "a", key="k").status_code == 409
    assert label(client, "a", key="k2").status_code == 202
    other = client.post(
        "/learn", json={"features": FEATURES, "label": 1}, headers={"Idempotency-Key": "k2"}
    )
    assert other.status_code == 409
