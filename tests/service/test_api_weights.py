"""``GET /models/{name}/weights`` and ``online-ctr models weights``: a model's largest weights
with the feature names the API recorded while hashing, against a real Redis and worker."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import feature_id
from online_ctr.metrics import Metrics
from online_ctr.store.keys import ModelKeys
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from tests.service.keys import AUTH, PREDICT_KEY
from tests.service.test_models_command import models, ok, refused
from tests.workers.conftest import scan_state
from workers.learner_loop import Worker, WorkerConfig

FTRL: dict[str, Any] = {"rule": "ftrl", "alpha": 0.1, "beta": 1.0, "l1": 0.5, "l2": 0.1}
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(
        redis_url=redis_url,
        state_buckets=64,
        state_shards=8,
        feature_names=True,
        feature_names_max=50,
        api_keys=AUTH["api_keys"],
        **FTRL,
    )


def rows(count: int, seed: int = 7) -> list[tuple[dict[str, str], int]]:
    """Examples of 3 fields x 8 values (24 names), label mostly from the site."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        site, os_, slot = rng.randrange(8), rng.randrange(8), rng.randrange(8)
        label = int(rng.random() < (0.9 if site < 2 else 0.1))
        out.append(({"site": f"s{site}", "os": f"o{os_}", "slot": f"p{slot}"}, label))
    return out


def learn(client: Any, examples: list[tuple[dict[str, str], int]], model: str = "") -> None:
    body = {"examples": [{"features": x, "label": y} for x, y in examples]}
    query = f"?model={model}" if model else ""
    assert client.post(f"/learn{query}", json=body, headers=JSON).status_code == 202


def apply(settings: Settings, name: str | None = None, config: ModelConfig | None = None) -> None:
    """Let a worker learn everything in the model's stream."""

    async def run() -> None:
        client = aioredis.Redis.from_url(str(settings.redis_url))
        spec = model_spec(settings) if config is None or name is None else config.spec(name)
        store = ModelStore(client, spec)
        worker = Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry()))
        await worker.run_until_idle()
        await client.aclose()

    asyncio.run(run())


def ftrl_weight(z: float, n: float) -> float:
    """FTRL-Proximal's weight written out (McMahan et al. 2013, algorithm 1)."""
    if abs(z) <= FTRL["l1"]:
        return 0.0
    rate = (FTRL["beta"] + math.sqrt(n)) / FTRL["alpha"] + FTRL["l2"]
    return float(-(z - math.copysign(FTRL["l1"], z)) / rate)


def independent_weights(settings: Settings) -> dict[int, float]:
    """Every feature's weight from a scan of its own (HGETALL of every bucket) and FTRL's
    formula above, not the code under test."""

    async def run() -> dict[int, float]:
        client = aioredis.Redis.from_url(str(settings.redis_url))
        rows = await scan_state(ModelStore(client, model_spec(settings)))
        await client.aclose()
        return {i: ftrl_weight(float(r[0]), float(r[1])) for i, r in rows.items()}

    return asyncio.run(run())


def test_top_weights_are_ordered_and_named(client: Any, settings: Settings) -> None:
    examples = rows(400)
    learn(client, examples[:200])  # the scanned path
    for start in range(200, 400, 50):  # the general path: a list value is never scanned
        body = [{"features": {**x, "tags": ["t"]}, "label": y} for x, y in examples[start:][:50]]
        assert client.post("/learn", json={"examples": body}).status_code == 202
    apply(settings)
    answer = client.get("/models/default/weights?top=10")
    assert answer.status_code == 200, answer.text
    got = answer.json()
    weights = independent_weights(settings)
    nonzero = [(i, w) for i, w in weights.items() if w != 0.0]
    expected = sorted(nonzero, key=lambda item: (-abs(item[1]), item[0]))[:10]
    assert [f["id"] for f in got["features"]] == [i for i, _ in expected]
    for feature, (_, w) in zip(got["features"], expected, strict=True):
        assert feature["weight"] == pytest.approx(w, rel=1e-12)
        assert set(feature["state"]) == {"z", "n"}
    names = {feature_id(f"{k}={v}"): f"{k}={v}" for x, _ in examples for k, v in x.items()}
    names[feature_id("tags=t")] = "tags=t"
    names[feature_id("")] = ""  # the bias, named by definition
    for feature in got["features"]:
        assert feature["name"] == names.get(feature["id"])
    assert got["names_recorded"] == 25 and got["names_max"] == 50
    assert got["global_step"] == 400


def test_a_feature_is_looked_up_by_name(client: Any, settings: Settings) -> None:
    learn(client, rows(100))
    apply(settings)
    answer = client.get("/models/default/weights", params={"feature": "site=s0"})
    assert answer.status_code == 200, answer.text
    (feature,) = answer.json()["features"]
    weights = independent_weights(settings)
    assert feature["id"] == feature_id("site=s0") and feature["name"] == "site=s0"
    assert feature["weight"] == pytest.approx(weights[feature["id"]], rel=1e-12)
    never = client.get("/models/default/weights", params={"feature": "site=never-sent"})
    assert never.status_code == 404
    assert "no weight for feature 'site=never-sent'" in never.json()["detail"]
    assert "never learned" in never.json()["detail"]


def test_a_number_is_looked_up_as_sent_and_shows_its_bucket(
    client: Any, settings: Settings
) -> None:
    assert settings.numeric == "log_bucket"
    # 20 is in log_bucket 8: `n` only as a number, `hour` as a number and as the category "20".
    sent: list[tuple[dict[str, Any], int]] = [
        ({"site": "s0", "n": 20, "hour": 20}, 1),
        ({"site": "s1", "n": 20, "hour": "20"}, 0),
    ]
    learn(client, sent)  # type: ignore[arg-type]
    apply(settings)
    answer = client.get("/models/default/weights", params={"feature": "n=20"})
    assert answer.status_code == 200, answer.text
    (bucket,) = answer.json()["features"]
    assert bucket["name"] == "n=8" and bucket["number"] == 20
    assert bucket["id"] == feature_id("n=8")
    assert bucket["weight"] == pytest.approx(independent_weights(settings)[bucket["id"]])
    both = client.get("/models/default/weights", params={"feature": "hour=20"}).json()
    assert [(f["name"], f["number"]) for f in both["features"]] == [
        ("hour=20", None),
        ("hour=8", 20),
    ]
    # The bucket's own name still finds it (8 is also a number: its bucket 4 holds nothing).
    by_bucket = client.get("/models/default/weights", params={"feature": "hour=8"}).json()
    assert [(f["name"], f["number"]) for f in by_bucket["features"]] == [("hour=8", None)]
    never = client.get("/models/default/weights", params={"feature": "hour=3000"})
    assert never.status_code == 404
    detail = never.json()["detail"]
    assert "'hour=3000' (id" in detail and "'hour=64' (id" in detail


def test_names_are_bounded_at_the_limit(
    client: Any, settings: Settings, plain: Any, registry: CollectorRegistry
) -> None:
    # 80 distinct names in one body: the first 50 (in order of first sight) are recorded.
    examples = [({"f": f"v{i}", "g": f"w{i}"}, i % 2) for i in range(40)]
    learn(client, examples)
    answer = client.get("/models/default/weights", params={"feature": "f=v0"})
    assert answer.status_code in (200, 404)  # nothing applied yet: 404; the flush ran anyway
    key = ModelKeys("default").feature_names
    recorded = {int.from_bytes(k, "little"): v.decode() for k, v in plain.hgetall(key).items()}
    first = [name for x, _ in examples for name in (f"f={x['f']}", f"g={x['g']}")][:50]
    assert recorded == {feature_id(name): name for name in first}
    labels = {"model": "default"}
    assert registry.get_sample_value("online_ctr_feature_names_refused_total", labels) == 30
    learn(client, examples)  # names hashed before: nothing new is sent, nothing refused
    client.get("/models/default/weights", params={"feature": "f=v0"})
    assert registry.get_sample_value("online_ctr_feature_names_refused_total", labels) == 30
    assert plain.hlen(key) == 50


def test_predict_records_names_too(client: Any, plain: Any) -> None:
    body = {"examples": [{"features": {"site": "only-predicted"}}]}
    assert client.post("/predict", json=body, headers=JSON).status_code == 200
    assert client.post("/predict", json={"features": {"os": "single"}}).status_code == 200
    client.get("/models/default/weights", params={"feature": "os=single"})  # flushes
    recorded = set(plain.hvals(ModelKeys("default").feature_names))
    assert recorded == {b"site=only-predicted", b"os=single"}


def test_without_the_option_there_is_no_record_and_the_answer_says_how(
    client: Any, settings: Settings, plain: Any
) -> None:
    assert client.put("/models/unnamed", json=FTRL).status_code == 201
    learn(client, rows(50), model="unnamed")
    apply(settings, "unnamed", ModelConfig(**FTRL))
    answer = client.get("/models/unnamed/weights")
    assert answer.status_code == 409
    detail = answer.json()["detail"]
    assert "does not record feature names" in detail and '"feature_names": true' in detail
    assert "--feature-names" in detail
    assert not plain.exists(ModelKeys("unnamed").feature_names)
    looked_up = client.get("/models/unnamed/weights", params={"feature": "site=s0"})
    assert looked_up.status_code == 200
    assert looked_up.json()["names_recorded"] is None


def test_a_deleted_model_loses_its_record(client: Any, plain: Any) -> None:
    config = {**FTRL, "feature_names": True, "group": "ctr"}
    assert client.put("/models/named", json=config).status_code == 201
    learn(client, rows(20), model="ctr")  # hashed by the group's serving model
    assert client.get("/models/named/weights?top=3").status_code == 200
    key = ModelKeys("named", group="ctr").feature_names
    assert plain.hlen(key) == 24
    assert client.delete("/models/named").status_code == 200
    assert not plain.exists(key)
    assert client.get("/models/named/weights?top=3").status_code == 404


def test_weights_need_the_admin_scope(client: Any) -> None:
    predictor = {"Authorization": f"Bearer {PREDICT_KEY}"}
    assert client.get("/models/default/weights", headers=predictor).status_code == 403
    assert client.get("/models/default/weights", headers={"Authorization": ""}).status_code == 401
    assert client.get("/models/default/weights?top=0").status_code == 422
    assert client.get("/models/default/weights?top=1001").status_code == 422


def test_the_command_prints_the_weights(client: Any, settings: Settings, redis_url: str) -> None:
    learn(client, [*rows(199), ({"hour": 20}, 1)])  # type: ignore[list-item]
    apply(settings)
    client.get("/models/default/weights", params={"feature": "site=s0"})  # flushes the names
    printed = ok(models(redis_url, "weights", "default", "--top", "3")).splitlines()
    # 24 names of rows(), and hour=8 (a number is recorded as the feature it became)
    assert printed[0] == "model 'default' at step 200, 25 of at most 100000 names recorded"
    assert printed[1].split("\t") == ["weight", "name", "id", "z", "n"]
    api = client.get("/models/default/weights?top=3").json()["features"]
    assert [line.split("\t")[1] for line in printed[2:]] == [f["name"] or "(bias)" for f in api]
    looked_up = ok(models(redis_url, "weights", "default", "--feature", "site=s1", "--json"))
    assert '"name": "site=s1"' in looked_up
    by_number = ok(models(redis_url, "weights", "default", "--feature", "hour=20"))
    assert by_number.splitlines()[2].split("\t")[1] == "hour=8 (from hour=20)"
    refused(models(redis_url, "weights", "default", "--feature", "x=y"), 1, "no weight for")
    bad_top = models(redis_url, "weights", "default", "--top", "0")
    assert bad_top.returncode == 2 and "--top: a whole number from 1 to 1000" in bad_top.stderr
    assert client.put("/models/unnamed", json=FTRL).status_code == 201
    refused(models(redis_url, "weights", "unnamed"), 1, "--feature-names")
    assert np.isfinite(api[0]["weight"])
