"""Worker heartbeats: dead workers' names are forgotten, the living stay registered."""

from __future__ import annotations

import pytest

from online_ctr.store.state import ModelStore
from tests.workers.conftest import MakeStore, make_worker

pytestmark = pytest.mark.anyio


async def registered(store: ModelStore) -> dict[str, float]:
    """The registered worker names and their last heartbeats."""
    pairs = await store.redis.zrange(store.keys.workers, 0, -1, withscores=True)
    return {name.decode(): score for name, score in pairs}


async def test_heartbeat_forgets_workers_silent_longer_than_the_bound(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    seconds, _ = await store.redis.time()
    dead = {f"dead{index}": seconds - 1000 - index for index in range(30)}
    await store.redis.zadd(store.keys.workers, {**dead, "recent": seconds - 5})
    await store.heartbeat("alive", forget_after_s=100)
    assert set(await registered(store)) == {"recent", "alive"}
    assert 0 <= (await store.heartbeat_age() or 0) < 1


async def test_heartbeat_without_a_bound_forgets_nobody(make_store: MakeStore) -> None:
    store = await make_store()
    seconds, _ = await store.redis.time()
    await store.redis.zadd(store.keys.workers, {"old": seconds - 10_000})
    await store.heartbeat("alive")
    assert set(await registered(store)) == {"old", "alive"}


async def test_a_worker_heartbeat_prunes_dead_workers(make_store: MakeStore) -> None:
    store = await make_store()
    seconds, _ = await store.redis.time()
    await store.redis.zadd(store.keys.workers, {"killed": seconds - 60, "standby": seconds - 1})
    worker = make_worker(store, name="w1", forget_workers_after_s=30)
    await worker.run_until_idle()
    assert set(await registered(store)) == {"standby", "w1"}
