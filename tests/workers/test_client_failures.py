"""What redis-py raises on a broken connection is a client failure (an HTTP 503, waited out by
the learner), whatever its class; an error of our own, or of redis-py's argument handling, is
not. Real exceptions from real redis-py objects on a real Redis: no mocks."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster

from online_ctr.config.settings import Settings
from online_ctr.learning.features import Example
from online_ctr.store.failures import client_failure, redis_trouble
from service.api.errors import error_answer
from tests.workers.conftest import MakeStore, make_worker, send

pytestmark = pytest.mark.anyio

SETTINGS = Settings(redis_url="redis://unused", retry_after_s=3)


async def error_of(call: Callable[[], Awaitable[object]]) -> Exception:
    """The error ``call`` raises, as it starts or as it is awaited."""
    try:
        await call()
    except Exception as error:
        return error
    raise AssertionError("the call did not fail")


async def write_after_teardown(url: str) -> Exception:
    """A command sent on a connection that another task tears down between the send's check
    that it is connected and its write (as a client's ``aclose()`` does to commands in flight):
    redis-py's own asyncio connection, on the test Redis."""
    client = aioredis.Redis.from_url(url, socket_timeout=1.0)
    connection = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    await connection.connect()
    sending = asyncio.ensure_future(connection.send_command("PING"))
    await asyncio.sleep(0)  # the send checked the connection and yields to its write's task
    await connection.disconnect(nowait=True)
    error = await error_of(lambda: sending)
    await client.aclose()
    return error


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_write_on_a_connection_torn_down_under_it_is_a_503(redis_url: str) -> None:
    error = await write_after_teardown(redis_url)
    # The failure seen in a failover: not a RedisError, raised inside redis-py's connection.
    assert isinstance(error, AttributeError), repr(error)
    assert "writelines" in str(error)
    assert client_failure(error) and redis_trouble(error)
    status, body, headers = error_answer(error, SETTINGS)
    assert (status, headers) == (503, {"Retry-After": "3"})
    assert "Redis is unavailable (AttributeError)" in str(body["detail"])


async def test_a_connection_lost_in_a_blocking_read_is_a_client_failure(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url, socket_timeout=5.0)
    connection = client.connection_pool.make_connection()  # type: ignore[no-untyped-call]
    await connection.connect()
    await connection.send_command("BLPOP", "nothing", 2)
    reading = asyncio.ensure_future(connection.read_response())
    await asyncio.sleep(0.05)
    await connection.disconnect()
    error = await error_of(lambda: reading)
    await client.aclose()
    assert isinstance(error, redis_errors.ConnectionError) and client_failure(error)


async def test_a_cluster_that_cannot_be_reached_is_a_503() -> None:
    client = RedisCluster(host="127.0.0.1", port=closed_port(), socket_connect_timeout=0.5)
    error = await error_of(client.initialize)
    await client.aclose()
    # A RedisClusterException whose cause is the refused connection (a 500 before).
    assert isinstance(error, redis_errors.RedisClusterException), repr(error)
    assert "cannot be connected" in str(error)
    assert client_failure(error)
    assert error_answer(error, SETTINGS)[0] == 503


async def test_errors_of_ours_and_redis_answers_are_not_client_failures(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = await make_store(shards=8)
    client = store.redis
    ours = await error_of(lambda: store.shards.apply(1, [(99, b"")]))  # a shard the model has not
    # redis-py's argument handling, given arguments it cannot use: our bug too.
    arguments = await error_of(lambda: client.zadd("k", [1, 2]))  # type: ignore[arg-type]
    reply = await error_of(lambda: client.eval("return redis.error_reply('ERR no')", 0))
    refused = await error_of(lambda: client.set("k", {"a": 1}))  # type: ignore[arg-type]
    assert isinstance(ours, IndexError) and isinstance(arguments, AttributeError)
    assert isinstance(reply, redis_errors.ResponseError)
    assert isinstance(refused, redis_errors.DataError)
    for error in (ours, arguments, reply, refused):
        assert not client_failure(error), repr(error)
    assert not redis_trouble(ours) and not redis_trouble(arguments)
    with caplog.at_level(logging.ERROR, logger="service.api.errors"):
        assert error_answer(ours, SETTINGS)[0] == 500
    assert caplog.records[-1].exc_info is not None  # logged with its traceback


async def cut_connections(
    pool: aioredis.ConnectionPool, cuts: int, user: asyncio.Future[None]
) -> int:
    """Tear down the pool's connections in use, as they are used, ``cuts`` times (or until
    their ``user`` ends)."""
    done = 0
    while done < cuts and not user.done():
        in_use = list(pool._in_use_connections)  # what a client's aclose() would cut
        for connection in in_use:
            await connection.disconnect(nowait=True)
        done += bool(in_use)
        await asyncio.sleep(0)
    return done


async def test_a_learner_waits_out_connections_torn_down_under_it(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = await make_store()
    rows: list[tuple[Example, int]] = [
        ({"site": f"s{n % 7}", "hour": float(n % 24)}, n % 2) for n in range(400)
    ]
    await send(store, rows, per_entry=4)
    worker = make_worker(store, batch_size=8, error_backoff_s=0.01, batch_wait_ms=5)
    with caplog.at_level(logging.WARNING, logger="workers.learner_loop"):
        running = asyncio.ensure_future(worker.run())
        assert isinstance(store.redis, aioredis.Redis)
        await cut_connections(store.redis.connection_pool, 40, running)
        async with asyncio.timeout(30):
            while (await store.version())[0] < len(rows):
                assert not running.done(), running.exception()
                await asyncio.sleep(0.02)
        worker.stop()
        await running  # ended as asked, not by an error
    assert await store.redis.xlen(store.keys.stream) == 0
    assert await store.redis.xlen(store.keys.dead) == 0  # nothing blamed on the data
    waited = [r.getMessage() for r in caplog.records if "redis unavailable" in r.getMessage()]
    assert waited, "no failure was provoked"
