"""Fixtures for worker tests: a model store on the test Redis, and ways to feed and inspect it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.learning.features import Example, FeatureHasher
from online_ctr.learning.rules import get_rule
from online_ctr.metrics import Metrics
from online_ctr.store import codec
from online_ctr.store.state import ModelStore, spec_from
from workers.learner_loop import Worker, WorkerConfig

MakeStore = Callable[..., Awaitable[ModelStore]]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def make_store(redis_url: str) -> AsyncIterator[MakeStore]:
    """Build ModelStores on the (flushed) test Redis; clients closed after the test."""
    clients: list[aioredis.Redis] = []

    async def make(
        rule: str = "ftrl",
        buckets: int = 64,
        name: str = "default",
        shards: int = 8,
        encoding: str = "float64",
        **params: Any,
    ) -> ModelStore:
        client = aioredis.Redis.from_url(redis_url)
        clients.append(client)
        params_ = get_rule(rule).params(**params)
        spec = spec_from(name, rule, params_, None, buckets, shards, encoding)
        store = ModelStore(client, spec)
        await store.ensure()
        return store

    yield make
    for client in clients:
        await client.aclose()


def make_worker(store: ModelStore, name: str = "w1", **config: Any) -> Worker:
    """A worker on a private metrics registry."""
    return Worker(store, WorkerConfig(name=name, **config), Metrics(CollectorRegistry()))


async def send(store: ModelStore, rows: Iterable[tuple[Example, int]], per_entry: int = 1) -> int:
    """Append labelled examples as the API would, ``per_entry`` per stream entry; returns the
    number of feature occurrences sent (bias included)."""
    hasher = FeatureHasher(store.spec.hash_bits, numeric=store.spec.numeric)
    rows = list(rows)
    occurrences = 0
    async with store.redis.pipeline(transaction=False) as pipe:
        for start in range(0, len(rows), per_entry):
            chunk = rows[start : start + per_entry]
            batch = hasher.batch([x for x, _ in chunk], [y for _, y in chunk])
            occurrences += batch.occurrences()
            pipe.xadd(store.keys.stream, {"b": codec.encode_entry(batch)})
        await pipe.execute()
    return occurrences


async def scan_state(store: ModelStore) -> dict[int, np.ndarray]:
    """Every feature's stored state, read by scanning every bucket hash of the model."""
    layout = store.spec.layout
    rows: dict[int, np.ndarray] = {}
    pattern = f"octr:{{{store.spec.name}/*}}:b:*"
    async for key in store.redis.scan_iter(match=pattern, count=1000):
        bucket = int(key.rsplit(b":", 1)[1])
        for field, value in (await store.redis.hgetall(key)).items():
            high = int.from_bytes(field, "little")
            feature = (high << layout.bucket_bits) | bucket
            assert feature not in rows, "a feature is stored twice"
            assert len(value) == layout.value_bytes
            rows[feature] = layout.values(value, 1)[0]
    return rows


def recount_nonzero(store: ModelStore, rows: dict[int, np.ndarray], t: int) -> int:
    """A full recount of nonzero weights at step ``t`` from scanned rows."""
    if not rows:
        return 0
    state = np.array(list(rows.values()))
    return int(np.count_nonzero(store.spec.rule.weights(state, t, store.spec.params)))
