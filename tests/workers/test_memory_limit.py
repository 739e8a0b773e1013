"""At Redis's memory limit (``maxmemory``, ``noeviction``) nothing is half-written and the
learner waits: a script is refused only before its first write, so a refused commit or apply
leaves every key byte for byte as it was (``DUMP``), and once there is room again the same
group commits, each example learned exactly once.

The limit is set on the test's real Redis with CONFIG SET and lifted before the test ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from redis.exceptions import OutOfMemoryError

from online_ctr.metrics import Metrics
from online_ctr.store.lease import Lease
from online_ctr.store.state import ModelStore
from tests.workers.conftest import MakeStore, make_worker, scan_state, send
from workers.cache import StateCache
from workers.committer import Committer
from workers.feedback import FeedbackStream
from workers.learn_group import Learning, learn_group
from workers.learner_loop import Worker, WorkerConfig
from workers.model_mirror import ModelMirror

pytestmark = pytest.mark.anyio

#: A limit below what any Redis holds: every write that may add memory is refused.
FULL = 1
SetLimit = Callable[[int], Awaitable[None]]


@pytest.fixture
async def limit(redis_url: str) -> AsyncIterator[SetLimit]:
    """Set the test Redis's maxmemory; back to none (0) after the test, whatever happened."""
    client = aioredis.Redis.from_url(redis_url)

    async def set_limit(size: int) -> None:
        await client.config_set("maxmemory", size)

    try:
        yield set_limit
    finally:
        await client.config_set("maxmemory", 0)
        await client.aclose()


async def dumps(store: ModelStore) -> dict[bytes, bytes | None]:
    """Every key of the Redis and its DUMP."""
    keys = [key async for key in store.redis.scan_iter(count=1000)]
    return {key: await store.redis.dump(key) for key in keys}


def rows(count: int, start: int = 0) -> list[tuple[dict[str, str], int]]:
    return [({"a": str(i % 7), "b": str(i % 5)}, i % 2) for i in range(start, start + count)]


async def learned_group(store: ModelStore, lease: Lease) -> tuple[Learning, str]:
    """The stream's head group learned, not committed; and its head entry."""
    group = await FeedbackStream(store).next_group(1000)
    assert group.batch is not None
    cache = StateCache(store.spec.width, 1000)
    mirror = ModelMirror(version=await store.version())
    learning = await learn_group(store, cache, group.batch, group.entry_ids, mirror)
    return learning, group.head


async def test_a_script_is_refused_only_before_its_first_write(
    make_store: MakeStore, limit: SetLimit
) -> None:
    """Redis 7's rule for a script without a shebang, which is the integrity argument: at the
    limit the first write that may add memory is refused if nothing was written before it;
    after any write the script runs to its end. So a script is refused whole or runs whole."""
    store = await make_store()
    client = store.redis
    await limit(FULL)
    with pytest.raises(OutOfMemoryError):
        await client.eval("redis.call('GET', 'x'); redis.call('SET', 'read-first', 1)", 0)
    wrote = "redis.call('DEL', 'none'); redis.call('SET', 'w', 1); return redis.call('INCR', 'w')"
    assert await client.eval(wrote, 0) == 2  # DEL frees memory, so it is allowed: then all is
    assert await client.exists("read-first") == 0
    with pytest.raises(OutOfMemoryError):
        await client.set("plain", 1)


def test_no_store_script_has_a_shebang() -> None:
    """A script with a shebang (``#!lua``) and no ``no-writes`` flag is refused at the limit
    before it runs, reads included: /predict's serve.lua would then fail at the limit."""
    for path in resources.files("online_ctr.store").iterdir():
        if path.name.endswith(".lua"):
            assert not path.read_text().startswith("#!"), path.name


async def test_a_commit_refused_at_the_limit_writes_nothing_and_goes_through_after(
    make_store: MakeStore, limit: SetLimit
) -> None:
    store = await make_store()
    await send(store, rows(40))
    await make_worker(store, batch_size=10).run_until_idle()  # some history
    await store.redis.delete(store.keys.lease)  # as if it expired
    await send(store, rows(30, 40), per_entry=3)
    lease = Lease(store.keys, store.scripts, "w2", 5000)
    assert await lease.hold()
    learning, head = await learned_group(store, lease)
    t_before = (await store.version())[0]

    await limit(FULL)
    before = await dumps(store)
    with pytest.raises(OutOfMemoryError):
        await store.log.finalize(learning.change, lease.token, 0)
    assert await dumps(store) == before

    # The committer's way: wait (here: the limit is lifted), then the same commit again.
    waits: list[OutOfMemoryError] = []

    async def room_returns(error: OutOfMemoryError) -> None:
        waits.append(error)
        await limit(0)

    committer = Committer(store, StateCache(store.spec.width, 1000), lease)
    commit = await committer.commit(learning, at_limit=room_returns)
    await committer.settle()
    assert len(waits) == 1 and commit.status == "ok"
    assert commit.t == t_before + 30
    assert await store.redis.hget(store.keys.failures, head) is None  # a clean commit


async def test_an_apply_refused_at_the_limit_writes_nothing(
    make_store: MakeStore, limit: SetLimit
) -> None:
    store = await make_store()
    await send(store, rows(30))
    lease = Lease(store.keys, store.scripts, "w1", 5000)
    assert await lease.hold()
    learning, _ = await learned_group(store, lease)
    commit = await store.log.finalize(learning.change, lease.token, 0)
    assert commit.status == "ok"

    await limit(FULL)
    before = await dumps(store)
    with pytest.raises(OutOfMemoryError):
        await store.shards.apply(commit.seq, learning.change.runs)
    assert await dumps(store) == before
    await limit(0)
    await store.shards.apply(commit.seq, learning.change.runs)
    assert (await store.log.pending())[0][0] == commit.seq  # the redo log kept it meanwhile


async def test_reading_a_group_again_after_a_refusal_is_no_delivery(make_store: MakeStore) -> None:
    store = await make_store()
    await send(store, rows(3))
    stream = FeedbackStream(store)
    first = await stream.next_group(10)
    stream.uncount(first.head)
    again = await stream.next_group(10)
    assert (first.head_deliveries, again.head_deliveries) == (1, 1)
    assert (await stream.next_group(10)).head_deliveries == 2


async def wait_for(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_worker_waits_at_the_limit_and_learns_everything_once_after(
    make_store: MakeStore, limit: SetLimit, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workers.memory_wait")
    store = await make_store()
    await send(store, rows(200), per_entry=10)
    metrics = Metrics(CollectorRegistry())
    config = WorkerConfig(name="w1", batch_size=50, error_backoff_s=0.01, heartbeat_interval_s=0.05)
    worker = Worker(store, config, metrics)
    refusals = metrics.redis_memory_refusals.labels("commit")
    await limit(FULL)
    task = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: _above(refusals, 5), "five refusals")
        assert (await store.version())[0] == 0  # nothing learned, nothing half-learned
        assert await store.redis.hlen(store.keys.failures) == 0  # no delivery counted
        assert metrics.redis_maxmemory._value.get() == FULL
        await limit(0)
        await wait_for(lambda: _learned(store, 200), "every example learned")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)  # ended by stop, not by an error
    warnings = [r for r in caplog.records if "memory limit and refused" in r.getMessage()]
    assert len(warnings) == 1  # said once, not at every retry
    assert any("learning resumes after" in r.getMessage() for r in caplog.records)
    assert await store.redis.xlen(store.keys.dead) == 0
    assert await store.redis.hlen(store.keys.failures) == 0
    assert await store.redis.xlen(store.keys.stream) == 0


async def _above(counter: object, count: int) -> bool:
    return float(counter._value.get()) >= count  # type: ignore[attr-defined]


async def _learned(store: ModelStore, examples: int) -> bool:
    return (await store.version())[0] == examples


async def test_refusals_anywhere_in_learning_leave_the_model_a_clean_run_learns(
    make_store: MakeStore, limit: SetLimit
) -> None:
    """The limit switched on and off every few milliseconds while a worker learns, so that
    heartbeats, leases, reads of a group, finalizes and applies are each refused somewhere:
    the model ends bit for bit as a worker that never met the limit leaves it."""
    examples = [({"a": str(i % 97), "b": str(i % 53), "c": str(i)}, i % 2) for i in range(1000)]
    clean, limited = await make_store(name="clean"), await make_store(name="limited")
    for store in (clean, limited):
        await send(store, examples, per_entry=10)
    await make_worker(clean, batch_size=20).run_until_idle()
    metrics = Metrics(CollectorRegistry())
    config = WorkerConfig(name="w1", batch_size=20, error_backoff_s=0.001, heartbeat_interval_s=0)
    worker = Worker(limited, config, metrics)
    task = asyncio.create_task(worker.run())
    try:
        for flip in range(10_000):
            await limit(FULL if flip % 2 == 0 else 0)
            await asyncio.sleep(0.002)
            if await _learned(limited, len(examples)):
                break
        await limit(0)
        await wait_for(lambda: _learned(limited, len(examples)), "every example learned")
        # and applied: a commit whose apply was refused is in the redo log until then.
        await wait_for(lambda: _applied(limited), "every commit applied to the shards")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    assert metrics.redis_memory_refusals.labels("commit")._value.get() > 10
    state, expected = await scan_state(limited), await scan_state(clean)
    assert len(state) > 1000
    assert {k: v.tolist() for k, v in state.items()} == {k: v.tolist() for k, v in expected.items()}
    for key in ("t", "logloss_sum", "nnz_stable", "tracked"):
        assert await limited.redis.hget(limited.keys.meta, key) == await clean.redis.hget(
            clean.keys.meta, key
        )
    assert await limited.redis.xlen(limited.keys.dead) == 0
    assert await limited.redis.hlen(limited.keys.failures) == 0


async def _applied(store: ModelStore) -> bool:
    """Whether every shard has applied the model's last commit."""
    last = await store.redis.hget(store.keys.meta, "seq")
    shards = range(store.spec.layout.shards)
    return all([await store.redis.get(store.keys.shard(s).applied) == last for s in shards])
