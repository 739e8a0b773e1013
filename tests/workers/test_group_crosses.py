"""Crosses as challengers in the service: a sweep over sets of crosses makes a group whose
models each hash the group's feedback their own way (one entry per model, in one atomic
append), each learning exactly what ``online-ctr replay --crosses`` learns; refused where the
group's feedback is hashed once for all (joins, negative sampling)."""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.crosses import parse_crosses
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.store.keys import RegistryKeys
from online_ctr.store.registry import Registry
from online_ctr.store.state import ModelStore
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from tests.service.test_models_command import models, ok, refused
from tests.workers.conftest import scan_state
from tests.workers.test_groups_match_replay import fleet

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.anyio

EXAMPLES = list(itertools.islice(read_examples(CRITEO, "criteo"), 1_000))
CROSSES = ["", "C1&C2", "C1&C2,C14&C17"]
BASE = {"state_buckets": 64, "state_shards": 8}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, state_shards=8, **AUTH)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        yield client


def sent(client: TestClient, key: str | None = None) -> None:
    for start in range(0, len(EXAMPLES), 250):
        chunk = EXAMPLES[start : start + 250]
        body = {"examples": [{"features": x, "label": y} for x, y in chunk]}
        headers = {"Idempotency-Key": f"{key}-{start}"} if key else {}
        reply = client.post("/learn", json=body, params={"model": "ctr"}, headers=headers)
        assert reply.status_code == 202, reply.text


async def test_each_challenger_learns_its_crosses_as_its_own_replay(
    client: TestClient, settings: Settings, redis_url: str
) -> None:
    made = client.post("/groups/ctr/sweep", json={"crosses": CROSSES, "base": BASE})
    assert made.status_code == 201, made.text
    names = [m["name"] for m in made.json()["models"]]
    assert names == ["ctr-crosses_0", "ctr-crosses_1", "ctr-crosses_2"]
    assert [client.get(f"/models/{n}").json()["crosses"] for n in names] == CROSSES
    sent(client, key="k")
    sent(client, key="k")  # retried with the same keys: replayed, nothing appended twice
    redis = aioredis.Redis.from_url(redis_url)
    try:
        await fleet(redis, settings).run_until_idle()
        registry = Registry(redis, settings.max_models)
        configs = await registry.configs(names)
        for name, crosses in zip(names, CROSSES, strict=True):
            store = ModelStore(redis, configs[name].spec(name))
            model = InMemoryModel(store.spec.rule, store.spec.params)
            hasher = FeatureHasher(numeric="log_bucket", crosses=parse_crosses(crosses))
            replay(EXAMPLES, model, hasher, batch_size=1)
            stored, expected = await scan_state(store), model.snapshot()
            assert (await store.info()).t == model.t == len(EXAMPLES)
            assert stored.keys() == expected.keys()
            for feature, row in expected.items():
                np.testing.assert_array_equal(stored[feature], row[:-1])
        tracked = [(await ModelStore(redis, configs[n].spec(n)).info()).features_tracked
                   for n in names]  # fmt: skip
        assert tracked[0] < tracked[1] < tracked[2]
    finally:
        await redis.aclose()


@pytest.mark.parametrize("shared", [{"join_window_s": 60}, {"negative_rate": 0.5}])
def test_crosses_differ_only_where_each_model_hashes_its_feedback(
    client: TestClient, shared: dict[str, Any]
) -> None:
    swept = client.post("/groups/g/sweep", json={"crosses": CROSSES, "base": shared})
    assert swept.status_code == 422 and "joins or negative sampling" in swept.text, swept.text
    assert client.get("/models/g-crosses_0").status_code == 404  # nothing created
    one = client.put("/models/a", json={"group": "h", "crosses": "C1&C2", **shared})
    assert one.status_code == 201, one.text
    other = client.put("/models/b", json={"group": "h", **shared})
    assert other.status_code == 409 and "crosses='C1&C2'" in other.text, other.text
    alike = client.put("/models/c", json={"group": "h", "crosses": "C1&C2", **shared})
    assert alike.status_code == 201, alike.text


def test_the_command_sweeps_crosses_too(redis_url: str) -> None:
    out = ok(models(redis_url, "sweep", "ads", "--crosses", "none,C1&C2+C14&C17", "--l1", "1"))
    assert out.split() == ["created", "ads-crosses_0-l1_1", "created", "ads-crosses_1-l1_1"]
    plain = redis.Redis.from_url(redis_url)
    try:
        recorded = [plain.hget(RegistryKeys().models, f"ads-crosses_{i}-l1_1") for i in (0, 1)]
    finally:
        plain.close()
    assert [json.loads(config).get("crosses") for config in recorded] == [None, "C1&C2,C14&C17"]
    refused(
        models(redis_url, "sweep", "ads", "--crosses", "none,C1&C1"),
        2,
        "--crosses",
        "crosses a field with itself",
    )
