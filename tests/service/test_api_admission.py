"""Feature admission as a model setting: ``admission`` in PUT /models and OCTR_ADMISSION,
``bloom:N:D`` (the counts halved every D examples) among its forms, shown by
GET /models/{name} and refused with a message where it is not one."""

from __future__ import annotations

import warnings

import pytest
import redis
from pydantic import ValidationError

from online_ctr.config.settings import Settings
from tests.service.keys import AUTH

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, admission="bloom:2:5000", **AUTH
    )


def test_the_own_model_forgets_as_its_setting_says(client: TestClient) -> None:
    assert client.get("/models/default").json()["admission"] == "bloom:2:5000"


@pytest.mark.parametrize("admission", ["all", "poisson:0.03", "bloom:3", "bloom:3:100000"])
def test_a_model_is_created_with_each_form(client: TestClient, admission: str) -> None:
    made = client.put("/models/lean", json={"rule": "ftrl", "admission": admission})
    assert made.status_code == 201, made.text
    shown = client.get("/models/lean").json()
    assert shown["admission"] == admission
    # Only a counting filter has features waiting that it remembers: none yet.
    assert shown["features_pending_admission"] == (0 if admission.startswith("bloom") else None)


@pytest.mark.parametrize(
    ("tally", "pending"),
    [
        # 1,000 features remembered (3 counters each), of them 50 admitted in the current
        # period (the 4th, slot 3) and the one before: 950 wait; slot 1 is too old for N = 2.
        ({"counters_used": "3000", "admitted_recent": "0 7 40 10 0 0 0 0"}, 950),
        ({"counters_used": "3000", "admitted_recent": "0 7 40"}, None),  # not finalize's
        ({"counters_used": "x", "admitted_recent": "0 0 0 0 0 0 0 0"}, None),
    ],
)
def test_the_estimate_is_the_committed_tally_s(
    client: TestClient, redis_url: str, tally: dict[str, str], pending: int | None
) -> None:
    """GET /models/{name} estimates from the tally finalize.lua commits; one it cannot read
    shows null, not a 500."""
    client.put("/models/lean", json={"rule": "ftrl", "admission": "bloom:2:100"})
    meta = "octr:{lean}:meta"
    with redis.Redis.from_url(redis_url) as sync:
        assert sync.exists(meta)
        sync.hset(meta, mapping={"t": "350", **tally})
    assert client.get("/models/lean").json()["features_pending_admission"] == pending


@pytest.mark.parametrize(
    "bad", ["bloom:2:0", "bloom:2:", "bloom:2:1.5", "bloom:2:-3", "bloom:2:3:4", "bloom:0:10"]
)
def test_a_form_that_is_none_is_a_422(client: TestClient, bad: str) -> None:
    reply = client.put("/models/bad", json={"rule": "ftrl", "admission": bad})
    assert reply.status_code == 422 and "admission" in reply.text, reply.text


def test_the_setting_names_the_period_it_refuses() -> None:
    with pytest.raises(ValidationError, match="the period D of bloom:N:D must be a whole"):
        Settings(admission="bloom:2:0")
    assert Settings(admission="bloom:2:0100").admission == "bloom:2:100"
