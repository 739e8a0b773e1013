"""Importance weights and negative sampling at ``POST /learn``, against a real Redis: what the
stream holds is exactly :func:`keep_negatives` of what was sent, weights included; what was
accepted is counted whole; bad weights and rates are refused with a message."""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.readers import read_examples
from online_ctr.learning.sampling import keep_negatives, kept_negatives
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.metrics import Metrics
from online_ctr.store.codec import decode_entry
from online_ctr.store.impressions import Impressions
from online_ctr.store.keys import ModelKeys, RegistryKeys
from online_ctr.store.model_config import own_config
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 300))
RATE = 0.25


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, negative_rate=RATE, **AUTH
    )


@pytest.fixture
def entries(plain: Any) -> Iterator[Any]:
    def read(model: str = "default", group: str | None = None) -> list[Batch]:
        stream = ModelKeys(model, group).stream
        return [decode_entry(f[b"b"]) for _, f in plain.xrange(stream)]

    yield read


def sampled_out(registry: CollectorRegistry, model: str = "default") -> float:
    value = registry.get_sample_value("online_ctr_sampled_out_examples_total", {"model": model})
    return value or 0.0


def body(rows: list[Any], weights: list[float | None] | None = None) -> dict[str, Any]:
    examples = [{"features": x, "label": y} for x, y in rows]
    for example, weight in zip(examples, weights or [], strict=False):
        if weight is not None:
            example["weight"] = weight
    return {"examples": examples}


def expected(rows: list[Any], rate: float, weights: list[float] | None = None) -> Batch:
    batch = FeatureHasher(numeric="log_bucket").batch([x for x, _ in rows], [y for _, y in rows])
    if weights is not None:
        batch = Batch(batch.indptr, batch.ids, batch.values, batch.labels, np.array(weights))
    return keep_negatives(batch, rate)


def assert_same(got: Batch, want: Batch) -> None:
    for name in ("indptr", "ids", "values", "labels"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    np.testing.assert_array_equal(got.example_weights(), want.example_weights())


@pytest.mark.parametrize("plain_body", [True, False], ids=["scanned", "parsed"])
def test_the_stream_holds_every_click_and_the_kept_non_clicks_weighted(
    client: TestClient, entries: Any, registry: CollectorRegistry, plain_body: bool
) -> None:
    """Both ways in (the compiled scan of a plain body, and pydantic's parse of one with a
    weight of 1 written out) append the same sampled, weighted entry."""
    weights = None if plain_body else [1.0] * len(ROWS)
    reply = client.post("/learn", json=body(ROWS, weights))
    assert (reply.status_code, reply.json()) == (202, {"accepted": len(ROWS)})
    (entry,) = entries()
    want = expected(ROWS, RATE)
    assert_same(entry, want)
    clicks = sum(y for _, y in ROWS)
    assert entry.labels.sum() == clicks  # every click, weight 1
    assert set(entry.example_weights()[entry.labels == 0]) == {1 / RATE}
    assert sampled_out(registry) == len(ROWS) - len(want) > 0


def test_given_weights_multiply_the_sampling_weight(client: TestClient, entries: Any) -> None:
    weights = [0.5 + (i % 7) for i in range(len(ROWS))]
    assert client.post("/learn", json=body(ROWS, weights)).status_code == 202  # type: ignore[arg-type]
    (entry,) = entries()
    assert_same(entry, expected(ROWS, RATE, weights))


def test_a_request_whose_every_example_is_dropped_appends_nothing_and_keeps_its_key(
    client: TestClient, entries: Any, registry: CollectorRegistry
) -> None:
    hasher = FeatureHasher(numeric="log_bucket")
    negatives = [(x, 0) for x, _ in ROWS]
    dropped = ~kept_negatives(hasher.batch([x for x, _ in negatives], [0] * len(ROWS)), RATE)
    gone = [row for row, out in zip(negatives, dropped, strict=True) if out][:5]
    headers = {"Idempotency-Key": "all-dropped"}
    first = client.post("/learn", json=body(gone), headers=headers)
    assert (first.status_code, first.json()) == (202, {"accepted": 5})
    assert entries() == []
    again = client.post("/learn", json=body(gone), headers=headers)
    assert (again.status_code, again.json()) == (202, {"accepted": 5})
    assert again.headers["Idempotent-Replayed"] == "true"
    other = client.post("/learn", json=body(gone[:4]), headers=headers)
    assert other.status_code == 409, other.text
    assert sampled_out(registry) == 5  # the replay is not counted twice


@pytest.mark.parametrize(
    ("weight", "says"),
    [
        (0, "greater than 0"),
        (-1.5, "greater than 0"),
        (1e7, "less than or equal to 1000000"),
        ("2", "valid number"),
        (True, "valid number"),
    ],
)
def test_a_bad_weight_is_a_422_naming_it(
    client: TestClient, entries: Any, weight: Any, says: str
) -> None:
    reply = client.post("/learn", json={"features": {"a": "b"}, "label": 1, "weight": weight})
    assert reply.status_code == 422
    assert "weight" in reply.text and says in reply.text, reply.text
    assert entries() == []


def test_a_non_finite_weight_is_a_422(client: TestClient, entries: Any) -> None:
    raw = b'{"features": {"a": "b"}, "label": 0, "weight": NaN}'
    reply = client.post("/learn", content=raw, headers={"Content-Type": "application/json"})
    assert reply.status_code == 422, reply.text
    assert entries() == []


def test_the_rate_is_a_model_setting_shown_and_checked(client: TestClient, entries: Any) -> None:
    assert client.get("/models/default").json()["negative_rate"] == RATE
    made = client.put("/models/half", json={"negative_rate": 0.5, "group": "g"})
    assert made.status_code == 201, made.text
    assert client.get("/models/half").json()["negative_rate"] == 0.5
    for bad in (0, 1.5, 1e-5, "0.5"):
        reply = client.put("/models/bad", json={"negative_rate": bad})
        assert reply.status_code == 422 and "negative_rate" in reply.text, reply.text
    # Every model of a group learns the one sampled entry: they share the rate.
    other = client.put("/models/other", json={"negative_rate": 0.2, "group": "g"})
    assert other.status_code == 409 and "negative_rate=0.5" in other.text, other.text
    same = client.put("/models/same", json={"negative_rate": 0.5, "group": "g"})
    assert same.status_code == 201, same.text
    assert client.post("/learn", json=body(ROWS), params={"model": "g"}).status_code == 202
    (half,), (also,) = entries("half", "g"), entries("same", "g")
    assert_same(half, expected(ROWS, 0.5))
    assert_same(also, half)


def test_a_model_without_a_rate_stores_what_it_did_before(redis_url: str, plain: Any) -> None:
    """Rate 1 and no weight: no weight bytes in the entry, and the model's registry record
    reads as one written before either existed."""
    settings = Settings(redis_url=redis_url, state_buckets=64, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        assert client.post("/learn", json=body(ROWS[:10])).status_code == 202
        assert client.get("/models/default").json()["negative_rate"] == 1.0
    ((_, fields),) = plain.xrange(ModelKeys("default").stream)
    assert fields[b"b"][9] == 0  # the flags byte: no values, no weights
    assert decode_entry(fields[b"b"]).weights is None
    record = plain.hget(RegistryKeys().models, "default")
    assert b"negative_rate" not in record


async def _learn_all(settings: Settings) -> None:
    client = aioredis.Redis.from_url(str(settings.redis_url))
    store = ModelStore(client, model_spec(settings))
    await Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry())).run_until_idle()
    await client.aclose()


def test_a_snapshot_keeps_the_learned_weight(client: TestClient, settings: Settings) -> None:
    assert client.post("/learn", json=body(ROWS)).status_code == 202
    asyncio.run(_learn_all(settings))
    learned = client.get("/models/default").json()
    assert learned["learned_weight"] > learned["global_step"] > 0
    with client.stream("GET", "/models/default/snapshot") as response:
        blob = b"".join(response.iter_raw())
    reader = Reader()
    list(reader.feed(blob))
    excess = float(reader.close().weight_excess)
    assert excess == learned["learned_weight"] - learned["global_step"]
    copied = client.put("/models/copy/snapshot", content=blob)
    assert copied.status_code == 201, copied.text
    copy = client.get("/models/copy").json()
    for field in ("global_step", "learned_weight", "progressive_logloss"):
        assert copy[field] == learned[field], field


async def _sweep(settings: Settings) -> None:
    client = aioredis.Redis.from_url(str(settings.redis_url))
    keys = ModelKeys("default")
    impressions = Impressions(client, keys.feedback, [keys.stream], own_config(settings).policy())
    while await client.zcard(keys.feedback.pending):
        await impressions.sweep()
        await asyncio.sleep(0.05)
    await client.aclose()


def test_joined_non_clicks_are_sampled_as_at_learn(redis_url: str, plain: Any) -> None:
    """Impressions served with joins on end as clicks (weight 1), as non-clicks labelled 0 or
    left to close unlabelled: those the rate keeps weighted 1/rate, the others never
    appended. The same examples sent to /learn would be sampled alike."""
    # A 3 s window: under four pytest processes on two cores, the labels of a 1 s window
    # arrived after it closed and were rightly refused as unknown.
    settings = Settings(
        redis_url=redis_url, state_buckets=64, negative_rate=RATE, join_window_s=3, **AUTH
    )
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        served = client.post("/predict", json={"examples": [{"features": x} for x, _ in ROWS]})
        ids = [p["prediction_id"] for p in served.json()["predictions"]]
        labelled = [
            (i, y) for j, (i, (_, y)) in enumerate(zip(ids, ROWS, strict=True)) if y or j % 2
        ]
        sent = [{"prediction_id": i, "label": y} for i, y in labelled]
        reply = client.post("/learn", json={"examples": sent})
        assert reply.json() == {"accepted": len(sent), "rejected": []}
    asyncio.run(_sweep(settings))

    entries = plain.xrange(ModelKeys("default").stream)
    got = {f[b"i"].decode(): decode_entry(f[b"b"]) for _, f in entries}
    batch = FeatureHasher(numeric="log_bucket").batch([x for x, _ in ROWS], [y for _, y in ROWS])
    kept = kept_negatives(batch, RATE)
    for j, (prediction_id, (_, y)) in enumerate(zip(ids, ROWS, strict=True)):
        if y == 1:
            assert got[prediction_id].labels.tolist() == [1.0]
            assert got[prediction_id].weights is None
        elif kept[j]:
            assert got[prediction_id].labels.tolist() == [0.0]
            assert got[prediction_id].example_weights().tolist() == [1 / RATE]
        else:
            assert prediction_id not in got
    clicks = sum(y for _, y in ROWS)
    assert len(got) == clicks + int(kept[batch.labels == 0].sum())
    assert len(keep_negatives(batch, RATE)) == len(got)  # what /learn would keep of them
