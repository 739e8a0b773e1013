"""A model deleted and created again with another rule under its learner: the fleet says so in
one warning line (no traceback, which reads as a crash) and learns the new model."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.metrics import Metrics
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.registry import Registry
from online_ctr.store.state import ModelStore
from workers.fleet import Fleet
from workers.learner_loop import WorkerConfig

pytestmark = pytest.mark.anyio

FTRL = ModelConfig(rule="ftrl", state_buckets=64, state_shards=8)
RDA = ModelConfig(rule="rda", state_buckets=64, state_shards=8)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    redis = aioredis.Redis.from_url(redis_url)
    yield redis
    await redis.aclose()


async def create(registry: Registry, client: aioredis.Redis, config: ModelConfig) -> None:
    """As POST /models does: recorded in the registry, then made in Redis."""
    await registry.create("x", config)
    await ModelStore(client, config.spec("x")).ensure()


async def test_a_model_created_again_otherwise_is_one_warning_and_learned_anew(
    client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry(client, 10)
    config = WorkerConfig(name="w1", lease_ttl_ms=300)
    fleet = Fleet(client, registry, config, Metrics(CollectorRegistry()), own="y", refresh_s=0.05)
    await create(registry, client, FTRL)
    await fleet.sync()  # its learner is made for the ftrl model
    # Deleted (DELETE /models/x) and created with another rule before the learner ran again.
    await registry.delete("x")
    await ModelStore(client, FTRL.spec("x")).delete()
    await create(registry, client, RDA)
    caplog.set_level(logging.INFO)
    running = asyncio.create_task(fleet.run())
    try:
        for _ in range(200):
            worker = fleet.workers.get("x")
            if worker is not None and worker.store.spec.rule.name == "rda" and worker.lease.token:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"no learner of the rda model\n{caplog.text}")
    finally:
        fleet.stop()
        await running
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([m for m in warnings if "created again with other settings" in m]) == 1, warnings
    assert "starts over" in warnings[0] and "'x'" in warnings[0]
