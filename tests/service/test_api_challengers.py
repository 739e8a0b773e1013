"""``/groups/{name}/sweep`` and ``/groups/{name}/promotion`` through the real app and a real
Redis: a grid of challengers in one call, bounded by OCTR_MAX_MODELS and refused whole; a
promotion policy set, shown and taken away; every bad request a 4xx that names its field."""

from __future__ import annotations

import typing
import warnings
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from online_ctr.challengers import SWEPT
from online_ctr.config.settings import Settings
from service.api.challenger_schemas import Swept
from service.app import create_app
from tests.service.keys import AUTH, HEADERS, PREDICT_KEY

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


LAYOUT = {"state_buckets": 64, "state_shards": 8}
GRID = {"alpha": [0.05, 0.1], "l1": [0.1, 1.0]}


def make_client(redis_url: str, **settings: object) -> TestClient:
    config = Settings(redis_url=redis_url, **LAYOUT, **AUTH, **settings)  # type: ignore[arg-type]
    return TestClient(create_app(config, CollectorRegistry()), headers=HEADERS)


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    with make_client(redis_url) as client:
        yield client


def test_a_sweep_creates_the_grid_once(client: TestClient) -> None:
    body = {"grid": GRID, "base": {"rule": "ftrl", **LAYOUT}}
    answer = client.post("/groups/ctr/sweep", json=body)
    assert answer.status_code == 201, answer.text
    names = [
        "ctr-alpha_0.05-l1_0.1",
        "ctr-alpha_0.05-l1_1",
        "ctr-alpha_0.1-l1_0.1",
        "ctr-alpha_0.1-l1_1",
    ]
    assert answer.json() == {
        "group": "ctr",
        "models": [{"name": n, "created": True} for n in names],
    }
    again = client.post("/groups/ctr/sweep", json=body).json()
    assert [m["created"] for m in again["models"]] == [False] * 4
    group = client.get("/groups/ctr").json()
    assert group["models"] == names and group["serving"] == names[0]
    assert group["promotion"] is None
    model = client.get(f"/models/{names[3]}").json()
    assert model["params"]["alpha"] == 0.1 and model["params"]["l1"] == 1.0


def test_a_sweep_with_a_policy_sets_it(client: TestClient) -> None:
    policy = {"margin": 0.002, "confidence": 0.99, "min_examples": 500, "planned_units": 5000}
    body = {"grid": {"alpha": [0.05, 0.1]}, "base": LAYOUT, "promotion": policy}
    assert client.post("/groups/ctr/sweep", json=body).status_code == 201
    group = client.get("/groups/ctr").json()
    assert group["promotion"] == policy and group["promotions"] == []
    # Before the promoter has run, every other model of the group stands at nothing paired.
    (challenger,) = group["challengers"]
    assert challenger["model"] != group["serving"]
    assert (challenger["paired_examples"], challenger["lower_bound"]) == (0, None)


def test_a_sweep_beyond_the_most_models_is_refused_whole(redis_url: str) -> None:
    with make_client(redis_url, max_models=4) as client:
        client.get("/models")  # the own model takes one place
        answer = client.post("/groups/ctr/sweep", json={"grid": GRID, "base": LAYOUT})
        assert answer.status_code == 409
        assert "needs 4 new models" in answer.json()["detail"]
        assert "OCTR_MAX_MODELS" in answer.json()["detail"]
        assert [m["name"] for m in client.get("/models").json()["models"]] == ["default"]


@pytest.mark.parametrize(
    ("grid", "named"),
    [
        ({"learning_rate": [0.1]}, "grid"),
        ({"alpha": []}, "grid"),
        ({"alpha": ["x"]}, "grid"),
        ({"alpha": list(range(1, 10)), "l1": list(range(1, 9))}, "72 combinations"),
        ({}, "at least one"),
    ],
)
def test_a_bad_grid_is_a_422_naming_it(
    client: TestClient, grid: dict[str, object], named: str
) -> None:
    answer = client.post("/groups/ctr/sweep", json={"grid": grid})
    assert answer.status_code == 422
    assert named in answer.text
    assert client.get("/groups/ctr").status_code == 404  # nothing created


def test_a_sweep_of_a_bad_value_for_the_rule_creates_nothing(client: TestClient) -> None:
    answer = client.post("/groups/ctr/sweep", json={"grid": {"alpha": [0.1, -1.0]}, "base": LAYOUT})
    assert answer.status_code == 422, answer.text
    assert "alpha" in answer.text


def test_the_policy_is_set_shown_and_taken_away(client: TestClient) -> None:
    assert client.put("/models/a", json={**LAYOUT, "group": "ctr"}).status_code == 201
    answer = client.put("/groups/ctr/promotion", json={"margin": 0.01})
    assert answer.status_code == 200
    assert answer.json()["promotion"] == {
        "margin": 0.01,
        "confidence": 0.95,
        "min_examples": 1000,
        "planned_units": 10000,
    }
    assert client.get("/models").json()["groups"][0]["promotion"]["margin"] == 0.01
    answer = client.delete("/groups/ctr/promotion")
    assert answer.status_code == 200 and answer.json()["promotion"] is None


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"margin": 1.0}, "margin"),
        ({"margin": -0.1}, "margin"),
        ({"confidence": 0.3}, "confidence"),
        ({"confidence": 1.0}, "confidence"),
        ({"min_examples": 0}, "min_examples"),
        ({"planned_units": 10**12 + 1}, "planned_units"),
        ({"min_examples": 1000.5}, "min_examples"),
        ({"margin": False}, "margin"),
        ({"confidence": "0.9"}, "confidence"),
        ({"margin": "NaN"}, "margin"),
        ({"speed": 1}, "speed"),
    ],
)
def test_a_bad_policy_is_a_422_naming_its_field(
    client: TestClient, body: dict[str, object], named: str
) -> None:
    assert client.put("/models/a", json={**LAYOUT, "group": "ctr"}).status_code == 201
    answer = client.put("/groups/ctr/promotion", json=body)
    assert answer.status_code == 422
    assert named in answer.text
    assert client.get("/groups/ctr").json()["promotion"] is None


def test_the_largest_policy_reads_back_as_it_was_given(client: TestClient) -> None:
    # Redis's Lua writes 14 significant digits: 2**53 came back as 9007199254741000, which
    # the policy then refused on every read of the registry (and the worker stopped).
    assert client.put("/models/a", json={**LAYOUT, "group": "ctr"}).status_code == 201
    policy = {"min_examples": 10**12, "planned_units": 10**12, "margin": 0.123456789012345}
    assert client.put("/groups/ctr/promotion", json=policy).status_code == 200
    stored = client.get("/groups/ctr").json()["promotion"]
    assert stored == {**policy, "confidence": 0.95, "margin": stored["margin"]}
    assert abs(stored["margin"] - policy["margin"]) < 1e-13


def test_a_sweep_takes_no_group_in_its_base(client: TestClient) -> None:
    answer = client.post("/groups/ctr/sweep", json={"grid": GRID, "base": {"group": "other"}})
    assert answer.status_code == 422 and "base.group" in answer.text


def test_a_policy_for_no_group_is_a_404(client: TestClient) -> None:
    answer = client.put("/groups/nothing/promotion", json={})
    assert answer.status_code == 404 and "no group 'nothing'" in answer.json()["detail"]
    assert client.put("/models/solo", json=LAYOUT).status_code == 201
    answer = client.delete("/groups/solo/promotion")
    assert answer.status_code == 404 and "is a model, not a group" in answer.json()["detail"]


def test_challengers_need_the_admin_scope(client: TestClient) -> None:
    other = {"Authorization": f"Bearer {PREDICT_KEY}"}
    assert client.put("/groups/ctr/promotion", json={}, headers=other).status_code == 403
    assert client.post("/groups/ctr/sweep", json={"grid": GRID}, headers=other).status_code == 403


def test_the_api_sweeps_what_the_registry_sweeps() -> None:
    assert typing.get_args(Swept) == SWEPT
