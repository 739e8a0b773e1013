"""serve.lua's call past redis-py's generic path sends what redis-py would send, answers what
the script answers, and keeps redis-py's behaviour on a flushed script cache, a connection the
server closed, and a Redis that does not answer."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection
from redis.exceptions import TimeoutError as RedisTimeoutError

from online_ctr.store.replica import MOST_COMMITS
from online_ctr.store.serve_call import KEPT_CONNECTIONS, ServeCall
from online_ctr.store.state import ModelStore
from tests.workers.conftest import MakeStore
from tests.workers.test_replica import model_of, replica_of

pytestmark = pytest.mark.anyio


def call_of(store: ModelStore) -> tuple[ServeCall, list[object]]:
    """The store's serve.lua call, and its fixed arguments as the script takes them."""
    keys = store.keys
    layout = store.spec.layout
    middle = [MOST_COMMITS, layout.field_bytes, layout.value_bytes, *keys.bucket_prefix_parts]
    middle.append(keys.applied_tail)
    return ServeCall(store.scripts.serve, keys.meta, middle, keys.redo), middle


def test_the_command_is_the_bytes_redis_py_packs() -> None:
    client = aioredis.Redis()
    script = client.register_script("return 1")
    middle = [32, 6, 16, "octr:{m/", "}:b:", "}:applied"]
    call = ServeCall(script, "octr:{m}:meta", middle, "octr:{m}:redo")
    for epoch, seq, records in [(b"", 0, b""), (b"0a1b/2", 12345, bytes(range(256)) * 40)]:
        args = ["EVALSHA", script.sha, 1, "octr:{m}:meta", epoch, seq, *middle]
        packed = Connection().pack_command(*args, records, "octr:{m}:redo")
        assert b"".join(call.command(epoch, seq, records)) == b"".join(packed)


async def test_it_answers_what_the_script_answers(make_store: MakeStore) -> None:
    store, ids, _ = await model_of(make_store, 300, 7, applied=True)
    call, middle = call_of(store)
    records = store.spec.layout.reads(ids).tobytes()
    epoch = await store.redis.hget(store.keys.meta, "epoch")
    for asked in (records, b""):
        args = [epoch, 0, *middle, asked, store.keys.redo]
        expected = await store.scripts.serve(keys=[store.keys.meta], args=args)
        assert await call(epoch, 0, asked) == expected


async def test_a_flushed_script_cache_a_closed_connection_and_overlapping_calls(
    make_store: MakeStore,
) -> None:
    store, ids, state = await model_of(make_store, 200, 8, applied=True)
    call, _ = call_of(store)
    expected = await call(b"", 0, b"")
    await store.redis.script_flush()
    assert await call(b"", 0, b"") == expected  # loaded again, as redis-py's Script does
    # The server closes the kept connection (a restart, a timeout of its own): the next call
    # connects again rather than failing.
    await store.redis.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    await asyncio.sleep(0.1)  # a while ago: its end has reached this process
    assert await call(b"", 0, b"") == expected
    # Calls that overlap each get a connection; at most KEPT_CONNECTIONS stay kept.
    answers = await asyncio.gather(*(call(b"", 0, b"") for _ in range(6)))
    assert answers == [expected] * 6
    assert len(call._kept) == KEPT_CONNECTIONS
    fresh = await replica_of(store).read(ids)  # and a copy reads through it exactly
    assert fresh is not None
    np.testing.assert_array_equal(fresh.state, state)


async def test_a_redis_that_does_not_answer_times_out(make_store: MakeStore) -> None:
    store = await make_store()
    await store.ensure()
    options = {**store.redis.connection_pool.connection_kwargs, "socket_timeout": 0.2}
    client = aioredis.Redis(connection_pool=aioredis.ConnectionPool(**options))
    call = ServeCall(client.register_script(store.scripts.serve.script), store.keys.meta, [], "x")
    # Scripts wait while writes are paused; a CLIENT UNPAUSE is not a write.
    await store.redis.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        with pytest.raises(RedisTimeoutError):
            await call(b"", 0, b"")
    finally:
        await store.redis.execute_command("CLIENT", "UNPAUSE")
        await client.aclose()
