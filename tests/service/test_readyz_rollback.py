"""/readyz reports a rollback of the model's log side that a learner found (issue 37)."""

from __future__ import annotations

import asyncio
import warnings

import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.metrics import Metrics
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from tests.service.keys import AUTH
from tests.workers.conftest import send
from tests.workers.test_log_rollback import AFTER, rolled_back
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, rule="rda", l1=0.001, **AUTH)


async def learn(settings: Settings, rollback: bool) -> None:
    """The real worker learns; with ``rollback``, across a failover that took the log back."""
    client = aioredis.Redis.from_url(str(settings.redis_url))
    store = ModelStore(client, model_spec(settings))
    worker = Worker(store, WorkerConfig(name="w1", batch_size=50), Metrics(CollectorRegistry()))
    if rollback:
        await rolled_back(store, worker)
        await send(store, AFTER)
    await worker.run_until_idle()
    await worker.lease.release()  # the next call's learner takes over at once
    await store.heartbeat("w1")
    await client.aclose()


def test_readyz_names_a_rollback_of_the_log_side(client: TestClient, settings: Settings) -> None:
    asyncio.run(learn(settings, rollback=False))
    reply = client.get("/readyz")
    assert reply.status_code == 200
    assert reply.json()["log_rollback"] is None

    asyncio.run(learn(settings, rollback=True))
    reply = client.get("/readyz")
    # Still ready: the learner repaired it and learns on; the report says what was lost.
    assert reply.status_code == 200
    report = reply.json()["log_rollback"]
    assert report is not None and "the log side went back" in report, report
    assert "ends at commit 6" in report, report


async def feed(settings: Settings) -> None:
    client = aioredis.Redis.from_url(str(settings.redis_url))
    await send(ModelStore(client, model_spec(settings)), AFTER)
    await client.aclose()


def test_readyz_names_state_shards_gone_back(client: TestClient, settings: Settings) -> None:
    asyncio.run(feed(settings))
    asyncio.run(learn(settings, rollback=False))
    assert client.get("/readyz").json()["shard_rollback"] is None
    plain = redis.Redis.from_url(str(settings.redis_url))
    # A shard's failover to a replica that lacked its last apply, the redo log trimmed past it.
    field, seq = max(plain.hgetall("octr:{default}:touched").items(), key=lambda i: int(i[1]))
    plain.set(f"octr:{{default/{int(field[1:])}}}:applied", str(int(seq) - 1))
    plain.xtrim("octr:{default}:redo", maxlen=0)
    plain.close()

    asyncio.run(learn(settings, rollback=False))  # the next learner finds it
    reply = client.get("/readyz")
    assert reply.status_code == 200  # learning goes on; the report says what was lost
    report = reply.json()["shard_rollback"]
    assert report is not None and "state shards went back" in report, report
