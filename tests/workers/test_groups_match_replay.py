"""A champion and two challengers on one stream: feedback sent once to the group, through the
real app, is learned by every model of it, each exactly as its own in-process replay; and the
worker process's fleet follows the registry as models come and go."""

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
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.metrics import Metrics
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.registry import Registry
from online_ctr.store.state import ModelStore
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from tests.workers.conftest import scan_state
from workers.fleet import Fleet
from workers.learner_loop import WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.anyio

ROWS = 1_500
MODELS = {
    "champion": {"rule": "ftrl", "alpha": 0.1, "l1": 1.0},
    "rda": {"rule": "rda", "gamma": 5.0, "l1": 0.5},
    "fobos": {"rule": "fobos", "alpha": 0.2, "l1": 0.001},
}
LAYOUT = {"numeric": "raw", "state_buckets": 64, "state_shards": 8, "group": "ctr"}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, state_shards=8, **AUTH)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings, CollectorRegistry())
    with TestClient(app, headers=HEADERS) as client:
        yield client


def fleet(redis: Any, settings: Settings) -> Fleet:
    config = WorkerConfig(name="w1", batch_size=512)
    registry = Registry(redis, settings.max_models)
    return Fleet(redis, registry, config, Metrics(CollectorRegistry()), own=settings.model)


async def test_every_model_of_a_group_equals_its_own_replay(
    client: TestClient, settings: Settings, redis_url: str
) -> None:
    for name, config in MODELS.items():
        assert client.put(f"/models/{name}", json={**config, **LAYOUT}).status_code == 201
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), ROWS))
    for start in range(0, ROWS, 100):
        chunk = examples[start : start + 100]
        body = {"examples": [{"features": x, "label": y} for x, y in chunk]}
        assert client.post("/learn", json=body, params={"model": "ctr"}).status_code == 202

    redis = aioredis.Redis.from_url(redis_url)
    try:
        await fleet(redis, settings).run_until_idle()
        for name, config in MODELS.items():
            store = ModelStore(redis, ModelConfig(**config, **LAYOUT).spec(name))
            model = InMemoryModel(store.spec.rule, store.spec.params)
            replay(examples, model, FeatureHasher(numeric="raw"), batch_size=1)
            stored, expected = await scan_state(store), model.snapshot()
            assert (await store.info()).t == model.t == ROWS
            assert stored.keys() == expected.keys()
            for feature, row in expected.items():  # same operations, same order: bit for bit
                np.testing.assert_array_equal(stored[feature], row[:-1])
    finally:
        await redis.aclose()


async def test_the_fleet_follows_the_registry(
    client: TestClient, settings: Settings, redis_url: str
) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        learners = fleet(redis, settings)
        client.get("/models")  # the own model registers itself on first use
        await learners.sync()
        assert set(learners.workers) == {"default"}
        client.put("/models/extra", json={"rule": "rda"})
        await learners.sync()
        assert set(learners.workers) == {"default", "extra"}
        client.post("/learn", json={"features": {"a": "b"}, "label": 1}, params={"model": "extra"})
        await learners.run_until_idle()
        assert client.get("/models/extra").json()["global_step"] == 1

        # Running: the model is deleted under its learner, which stops instead of creating it
        # again, and nothing of the model is left behind (its last heartbeat, its lease).
        learners.refresh_s = 0.02
        running = asyncio.create_task(learners.run())
        await asyncio.sleep(0.1)
        assert client.delete("/models/extra").status_code == 200
        for _ in range(250):
            await asyncio.sleep(0.02)
            if "extra" not in {*learners.workers, *learners.learning()}:
                break
        assert set(learners.workers) == {"default"}
        learners.stop()
        await asyncio.wait_for(running, 10)
        leftovers = [key async for key in redis.scan_iter(match="octr:{extra*")]
        assert leftovers == []
    finally:
        await redis.aclose()
