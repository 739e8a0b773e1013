"""The API's in-memory tables of every model share one budget each (issue 33): a client that
sends endless new names to several models leaves the name tables within
OCTR_NAME_TABLE_BYTES and the predict copies within OCTR_PREDICT_CACHE_FEATURES, visible on
/metrics, and every answer is the one a fresh process gives."""

from __future__ import annotations

import re
import warnings

import pytest
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from service.app import create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

NAME_BYTES = 1 << 20
COPY_FEATURES = 3000
MODELS = ("m0", "m1", "m2")


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        state_buckets=64,
        auth="off",
        name_table_bytes=NAME_BYTES,
        predict_cache_features=COPY_FEATURES,
    )


def sample(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found[1])


def body(model: int, first: int, count: int, numbers: bool) -> dict[str, object]:
    """New names each call; with ``numbers``, through the hasher's own cache (the general
    path), else through the compiled name tables."""
    rows = [
        {"features": {"user": f"{model}-{i}", "age": i} if numbers else {"user": f"{model}-{i}"}}
        for i in range(first, first + count)
    ]
    return {"examples": rows}


def test_a_flood_of_names_over_many_models_stays_within_the_budgets(
    client: TestClient, settings: Settings
) -> None:
    for name in MODELS:
        assert client.put(f"/models/{name}", json={"rule": "ftrl"}).status_code in (200, 201)
    answers = {}
    for round_ in range(12):
        for number, name in enumerate(MODELS):
            sent = body(number, round_ * 1000, 1000, numbers=round_ % 2 == 1)
            reply = client.post(f"/predict?model={name}", json=sent)
            assert reply.status_code == 200, reply.text
            answers[name, round_] = (sent, reply.json())
        metrics = client.get("/metrics").text
        assert sample(metrics, "online_ctr_name_table_bytes") <= NAME_BYTES
        assert sample(metrics, "online_ctr_predict_copy_features") <= COPY_FEATURES
    assert sample(metrics, "online_ctr_name_table_resets_total") > 0
    # A fresh process, with no tables at all, answers the same.
    with TestClient(create_app(settings, CollectorRegistry())) as fresh:
        for (name, _), (sent, answer) in list(answers.items())[-6:]:
            assert fresh.post(f"/predict?model={name}", json=sent).json() == answer
