"""``POST /predict`` answers only statuses its OpenAPI operation documents: each answer a test can
drive (keys on, joins on) is checked against ``app.openapi()``, and a body its schema allows is
never a 422 (a fuzzer such as schemathesis rightly calls that a schema-valid request rejected)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from service.app import create_app
from tests.service.keys import AUTH, HEADERS, LEARN_KEY

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

FEATURES = {"site": "news", "hour": 3.0}


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    settings = Settings(
        redis_url=redis_url, state_buckets=64, join_window_s=60, max_body_bytes=2048, **AUTH
    )
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        yield client


def documented(client: TestClient) -> set[int]:
    operation = client.app.openapi()["paths"]["/predict"]["post"]  # type: ignore[attr-defined]
    return {int(status) for status in operation["responses"]}


def answers(client: TestClient) -> dict[str, int]:
    """The status of each kind of /predict request, by what it is."""

    def post(body: Any, **kwargs: Any) -> int:
        return int(client.post("/predict", json=body, **kwargs).status_code)

    one = {"features": FEATURES, "prediction_id": "imp-1"}
    return {
        "scored": post({"features": FEATURES}),
        "no key": post({"features": FEATURES}, headers={"Authorization": ""}),
        "no predict scope": post(
            {"features": FEATURES}, headers={"Authorization": f"Bearer {LEARN_KEY}"}
        ),
        "no such model": post({"features": FEATURES}, params={"model": "nope"}),
        "first use of an id": post(one),
        "an id used before": post(one),
        "an id twice in a batch": post(
            {"examples": [{"features": FEATURES, "prediction_id": "b"}] * 2}
        ),
        "too large": post({"features": {f"f{n}": "x" * 20 for n in range(200)}}),
        "not JSON": int(
            client.post(
                "/predict", content=b"{}", headers={"Content-Type": "text/plain"}
            ).status_code
        ),
        "invalid": post({"features": FEATURES, "examples": []}),
    }


def test_every_answer_of_predict_is_documented(client: TestClient) -> None:
    got = answers(client)
    assert got == {
        "scored": 200,
        "no key": 401,
        "no predict scope": 403,
        "no such model": 404,
        "first use of an id": 200,
        "an id used before": 409,
        "an id twice in a batch": 409,
        "too large": 413,
        "not JSON": 415,
        "invalid": 422,
    }
    assert set(got.values()) <= documented(client)
    # And the ones no test here drives: a body too slow (408), Redis away (503).
    assert {408, 503} <= documented(client)


def test_a_batch_repeating_a_prediction_id_is_valid_by_its_schema(client: TestClient) -> None:
    """Why its answer is a 409 and not a 422: JSON Schema cannot say the ids differ."""
    schema = client.app.openapi()["components"]["schemas"]  # type: ignore[attr-defined]
    assert "uniqueItems" not in str(schema["PredictBatch"])
    body = {"examples": [{"features": FEATURES, "prediction_id": "same"}] * 2}
    reply = client.post("/predict", json=body)
    assert reply.status_code == 409, reply.text
    assert "repeated in this request" in reply.json()["detail"]
