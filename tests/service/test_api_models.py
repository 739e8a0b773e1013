"""Many models in one service: created, listed, served, grouped, promoted and deleted through
the admin API, against a real Redis."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import redis

from online_ctr.config.settings import Settings
from online_ctr.store.codec import decode_entry
from online_ctr.store.keys import ModelKeys
from tests.service.keys import AUTH, LEARN_KEY, PREDICT_KEY

FTRL = {"rule": "ftrl", "alpha": 0.1, "l1": 1.0}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, state_shards=8, max_models=5, **AUTH)


@pytest.fixture
def plain(redis_url: str) -> Any:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_a_model_is_created_once_and_then_confirmed(client: Any) -> None:
    created = client.put("/models/ctr-v2", json=FTRL)
    assert created.status_code == 201
    assert created.json()["name"] == "ctr-v2" and created.json()["params"]["alpha"] == 0.1
    assert client.put("/models/ctr-v2", json=FTRL).status_code == 200
    other = client.put("/models/ctr-v2", json={"rule": "rda"})
    assert other.status_code == 409
    assert "exists with another configuration" in other.json()["detail"]


def test_a_conflicting_create_names_each_differing_field(client: Any) -> None:
    assert client.put("/models/champion", json={**FTRL, "group": "ctr"}).status_code == 201
    other = client.put("/models/champion", json={"rule": "ftrl", "alpha": 0.05, "group": "ctr"})
    assert other.status_code == 409
    assert other.json()["detail"] == (
        "model 'champion' exists with another configuration: its alpha 0.1 (asked: 0.05) and "
        "its l1 1.0 (asked: unset); delete it first or choose another name"
    )


def test_a_model_is_validated_like_the_settings(client: Any) -> None:
    reply = client.put("/models/m", json={"rule": "rda", "alpha": 0.1})
    assert reply.status_code == 422
    assert "alpha not used by rule 'rda'; leave it out" in reply.json()["detail"]
    assert client.put("/models/m", json={"rule": "nope"}).status_code == 422
    assert client.put("/models/m", json={"rule": "ftrl", "colour": 1}).status_code == 422
    reply = client.put("/models/m", json={"rule": "rda", "state_encoding": "compact"})
    assert reply.status_code == 422 and "compact" in reply.json()["detail"]
    assert client.put("/models/default", json=FTRL).status_code == 409  # the own model


def test_models_are_listed_with_their_groups(client: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    client.put("/models/b", json={"rule": "rda", "group": "ctr"})
    client.put("/models/solo", json={"rule": "fobos"})
    listed = client.get("/models").json()
    assert [(m["name"], m["rule"], m["group"], m["own"]) for m in listed["models"]] == [
        ("a", "ftrl", "ctr", False),
        ("b", "rda", "ctr", False),
        ("default", "ftrl", None, True),
        ("solo", "fobos", None, False),
    ]
    assert listed["groups"] == [
        {
            "name": "ctr",
            "models": ["a", "b"],
            "serving": "a",
            "split": {},
            "join_window_s": 0,
            "unlabeled": "negative",
            "promotion": None,
        }
    ]


def test_the_number_of_models_is_bounded(client: Any) -> None:
    client.get("/models")  # the own model: one of the five
    for index in range(4):
        assert client.put(f"/models/m{index}", json=FTRL).status_code == 201
    refused = client.put("/models/m4", json=FTRL)
    assert refused.status_code == 409 and "OCTR_MAX_MODELS" in refused.json()["detail"]


def test_names_are_one_namespace(client: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    assert "name of a group" in client.put("/models/ctr", json=FTRL).json()["detail"]
    client.put("/models/solo", json=FTRL)
    refused = client.put("/models/b", json={**FTRL, "group": "solo"})
    assert refused.status_code == 409 and "name of a model" in refused.json()["detail"]


def test_models_of_a_group_share_hashing_and_joins(client: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    refused = client.put("/models/b", json={**FTRL, "group": "ctr", "hash_bits": 20})
    assert refused.status_code == 409 and "share" in refused.json()["detail"]
    refused = client.put("/models/b", json={**FTRL, "group": "ctr", "join_window_s": 60})
    assert refused.status_code == 409


def test_a_created_model_learns_and_predicts_by_name(client: Any, plain: Any) -> None:
    client.put("/models/other", json=FTRL)
    body = {"features": {"site": "news"}, "label": 1}
    assert client.post("/learn", json=body, params={"model": "other"}).status_code == 202
    assert plain.xlen(ModelKeys("other").stream) == 1
    assert plain.xlen(ModelKeys("default").stream) == 0
    answer = client.post("/predict", json={"features": {"site": "news"}}, params={"model": "other"})
    assert answer.json()["model"] == "other"


def test_feedback_for_a_group_reaches_every_model_of_it_once(client: Any, plain: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    client.put("/models/b", json={"rule": "rda", "group": "ctr"})
    body = {"examples": [{"features": {"site": "news"}, "label": 1}] * 3}
    headers = {"Idempotency-Key": "k-1"}
    for _ in range(2):  # a retry appends nothing
        reply = client.post("/learn", json=body, params={"model": "ctr"}, headers=headers)
        assert reply.status_code == 202
    entries = [plain.xrange(ModelKeys(m, "ctr").stream) for m in ("a", "b")]
    assert [len(e) for e in entries] == [1, 1]
    assert entries[0][0][1] == entries[1][0][1]  # the very same bytes
    assert len(decode_entry(entries[0][0][1][b"b"])) == 3


def test_a_group_answers_from_its_serving_model_and_splits_by_key(client: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    client.put("/models/b", json={"rule": "rda", "group": "ctr"})
    features = {"features": {"site": "news"}}
    assert client.post("/predict", json=features, params={"model": "ctr"}).json()["model"] == "a"
    promoted = client.put("/groups/ctr", json={"serving": "b", "split": {"a": 3, "b": 1}})
    assert promoted.json()["serving"] == "b"
    assert client.post("/predict", json=features, params={"model": "ctr"}).json()["model"] == "b"

    def answering(key: str) -> str:
        body = {**features, "split_key": key}
        model: str = client.post("/predict", json=body, params={"model": "ctr"}).json()["model"]
        return model

    counts = collections.Counter(answering(f"user-{i}") for i in range(400))
    assert 0.65 < counts["a"] / 400 < 0.85  # 3:1, give or take the sample's spread
    assert {answering("user-7") for _ in range(5)} == {answering("user-7")}  # stable
    # Promotion alone keeps the split; an empty split ends it.
    assert client.put("/groups/ctr", json={"serving": "a"}).json()["split"] == {"a": 3, "b": 1}
    assert client.put("/groups/ctr", json={"serving": "a", "split": {}}).json()["split"] == {}


def test_group_changes_are_checked(client: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    client.put("/models/b", json={"rule": "rda", "group": "ctr"})
    client.put("/models/solo", json=FTRL)
    assert client.put("/groups/ctr", json={"serving": "solo"}).status_code == 409
    assert client.put("/groups/ctr", json={"serving": "a", "split": {"a": -1}}).status_code == 422
    assert client.put("/groups/nope", json={"serving": "a"}).status_code == 404
    # Names that no model can have are the body's fault (a 422), never the registry's 500.
    for name in ("", "-a", "a" * 65):
        assert client.put("/groups/ctr", json={"serving": name}).status_code == 422
        assert client.put("/groups/x", json={"serving": "a", "split": {name: 1}}).status_code == 422
    assert client.get("/groups/solo").status_code == 404
    assert client.get("/models/ctr").status_code == 404
    refused = client.delete("/models/a")  # it serves the group, and b is still in it
    assert refused.status_code == 409 and "promote another" in refused.json()["detail"]


def test_deleting_models_removes_them_and_their_keys(client: Any, plain: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    client.put("/models/b", json={"rule": "rda", "group": "ctr"})
    client.post("/learn", json={"features": {"x": "y"}, "label": 0}, params={"model": "ctr"})
    headers = {"Idempotency-Key": "k-2"}  # a record of the group's, gone with its last model
    client.post(
        "/learn",
        json={"features": {"x": "y"}, "label": 0},
        params={"model": "ctr"},
        headers=headers,
    )
    assert client.delete("/models/b").json()["keys_deleted"] >= 2
    assert client.get("/groups/ctr").json()["models"] == ["a"]
    assert client.delete("/models/a").status_code == 200
    assert client.get("/groups/ctr").status_code == 404
    prefixes = (b"octr:{g:ctr}", b"octr:{a/", b"octr:{b/")
    assert not [key for key in plain.scan_iter() if key.startswith(prefixes)]
    gone = client.post("/learn", json={"features": {"x": "y"}, "label": 0}, params={"model": "a"})
    assert gone.status_code == 404
    assert client.delete("/models/a").status_code == 404


def test_models_and_groups_need_the_admin_scope(client: Any) -> None:
    for key in (PREDICT_KEY, LEARN_KEY):
        headers = {"Authorization": f"Bearer {key}"}
        assert client.get("/models", headers=headers).status_code == 403
        assert client.put("/models/x", json=FTRL, headers=headers).status_code == 403
        assert client.put("/groups/x", json={"serving": "x"}, headers=headers).status_code == 403


def test_an_imported_model_is_served_by_name_and_a_grouped_one_exports(client: Any) -> None:
    client.put("/models/a", json={**FTRL, "group": "ctr"})
    client.post("/learn", json={"features": {"x": "y"}, "label": 1}, params={"model": "ctr"})
    exported = client.get("/models/a/snapshot")
    assert exported.status_code == 200
    headers = {"Content-Type": "application/vnd.online-ctr.snapshot"}
    imported = client.put("/models/copy/snapshot", content=exported.content, headers=headers)
    assert imported.status_code == 201
    answer = client.post("/predict", json={"features": {"x": "y"}}, params={"model": "copy"})
    assert answer.status_code == 200 and answer.json()["model"] == "copy"
    assert "copy" in [m["name"] for m in client.get("/models").json()["models"]]
    refused = client.put(
        "/models/a/snapshot?replace=true", content=exported.content, headers=headers
    )
    assert refused.status_code == 409 and "no group" in refused.json()["detail"]
