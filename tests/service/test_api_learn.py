"""POST /learn against a real Redis: exactly the examples sent, one stream entry per request."""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis

from online_ctr.config.settings import Settings
from online_ctr.learning.features import Batch, Example, FeatureHasher, Value
from online_ctr.learning.readers import read_examples
from online_ctr.store.codec import decode_entry
from online_ctr.store.keys import ModelKeys
from service.api.scan import scan
from testkit.paths import CRITEO
from tests.service.keys import AUTH

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 50))
MIXED: dict[str, Value] = {
    "site": "news",
    "price": -2.5,
    "tags": ["a", "b", "a"],
    "zero": 0,
    "n": 3,
}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, hash_bits=20, **AUTH)


@pytest.fixture
def entries(redis_url: str) -> Iterator[Any]:
    """Read the model's stream: a list of decoded batches, oldest first."""
    client: Any = redis.Redis.from_url(redis_url)

    def read() -> list[Batch]:
        stream = client.xrange(ModelKeys("default").stream)
        assert all(set(fields) == {b"b"} for _, fields in stream)
        return [decode_entry(fields[b"b"]) for _, fields in stream]

    yield read
    client.close()


def assert_same_batch(got: Batch, expected: Batch) -> None:
    for name in ("indptr", "ids", "values", "labels"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)


def test_single_example_is_one_entry(client: TestClient, entries: Any) -> None:
    reply = client.post("/learn", json={"features": MIXED, "label": 1})
    assert (reply.status_code, reply.json()) == (202, {"accepted": 1})
    (entry,) = entries()
    assert_same_batch(entry, FeatureHasher(20, numeric="log_bucket").batch([MIXED], [1]))


def test_batch_is_one_entry_holding_every_example_in_order(
    client: TestClient, entries: Any
) -> None:
    rows: list[tuple[Example, int]] = [*ROWS, (MIXED, 0)]
    body = {"examples": [{"features": x, "label": y} for x, y in rows]}
    reply = client.post("/learn", json=body)
    assert (reply.status_code, reply.json()) == (202, {"accepted": len(rows)})
    (entry,) = entries()
    assert_same_batch(
        entry,
        FeatureHasher(20, numeric="log_bucket").batch([x for x, _ in rows], [y for _, y in rows]),
    )


def test_each_request_appends_one_entry(client: TestClient, entries: Any) -> None:
    for x, y in ROWS[:5]:
        assert client.post("/learn", json={"features": x, "label": y}).status_code == 202
    client.post("/learn", json={"examples": [{"features": x, "label": y} for x, y in ROWS[5:9]]})
    assert [len(batch) for batch in entries()] == [1, 1, 1, 1, 1, 4]


def test_nothing_is_appended_for_a_refused_request(client: TestClient, entries: Any) -> None:
    bad = [
        {"examples": [{"features": {"a": "b"}, "label": 1}, {"features": {"a": "b"}, "label": 2}]},
        {"features": {"a": "b"}, "label": 1, "examples": [{"features": {"a": "b"}, "label": 1}]},
    ]
    for body in bad:
        assert client.post("/learn", json=body).status_code == 422
    reply = client.post("/learn", json={"features": {"a": "b"}, "label": 1}, params={"model": "x"})
    assert reply.status_code == 404
    assert entries() == []


def test_learning_never_happens_on_the_request_path(client: TestClient) -> None:
    client.post("/learn", json={"examples": [{"features": x, "label": y} for x, y in ROWS]})
    info = client.get("/models/default").json()
    assert (info["global_step"], info["stream_lag"], info["features_tracked"]) == (0, 1, 0)


@pytest.mark.parametrize("single", [False, True])
def test_scanned_and_validated_bodies_make_the_same_entry(
    client: TestClient, entries: Any, single: bool
) -> None:
    """A plain body is read by service.api.scan; the same JSON with an escape in it goes
    through validation: the stream entries are the same."""
    examples = [{"features": x, "label": y} for x, y in ROWS]
    plain = json.dumps(examples[0] if single else {"examples": examples}).encode()
    escaped = plain.replace(b'"label"', b'"\\u006cabel"')
    assert scan(plain, want_label=True) is not None and scan(escaped, True) is None
    for body in (plain, escaped):
        reply = client.post("/learn", content=body, headers={"content-type": "application/json"})
        assert (reply.status_code, reply.json()) == (202, {"accepted": 1 if single else len(ROWS)})
    first, second = entries()
    assert_same_batch(first, second)


def test_a_plain_body_over_the_limits_gets_the_validated_answer(client: TestClient) -> None:
    examples = [{"features": {"f": str(i)}, "label": 0} for i in range(1001)]
    body = json.dumps({"examples": examples}).encode()
    assert scan(body, want_label=True) is not None
    reply = client.post("/learn", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 422
    assert "1001 examples; at most 1000 per request" in reply.json()["detail"]


def test_names_learned_do_not_enter_the_table_of_names_predicted(client: TestClient) -> None:
    # A stream of new features through /learn must not crowd out, or slow, the look-up of
    # the names /predict sees again and again.
    own = client.app.state.catalog.own  # type: ignore[attr-defined]
    body = {"examples": [{"features": {"f": f"v{i}"}, "label": i % 2} for i in range(500)]}
    assert client.post("/learn", json=body).status_code == 202
    assert own.learn_names.count == 500 and own.names.count == 0
    reply = client.post("/predict", json={"features": {"f": "v1", "g": "w"}})
    assert reply.status_code == 200
    assert own.names.count == 2 and own.learn_names.count == 500
