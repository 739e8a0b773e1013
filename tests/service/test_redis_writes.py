"""How the service's Redis client sends a command (online_ctr.wiring): at once when the socket
takes it whole, else waiting for the drain within OCTR_REDIS_TIMEOUT_S, with redis-py's errors
either way; on a real Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from online_ctr.wiring import redis_client

#: Bigger than any socket buffer: the transport keeps some, and the send waits for the drain.
BIG = 32 * 1024 * 1024


def test_small_and_big_commands_arrive_whole(redis_url: str) -> None:
    async def scenario() -> tuple[bytes | None, int | None]:
        client = redis_client(Settings(redis_url=redis_url))
        try:
            await client.set("small", b"x")
            await client.set("big", b"y" * BIG)
            return await client.get("small"), await client.strlen("big")
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == (b"x", BIG)


def test_a_connection_the_server_closed_fails_once_then_reconnects(redis_url: str) -> None:
    async def scenario() -> bytes | None:
        client = redis_client(Settings(redis_url=redis_url))
        try:
            await client.set("k", b"v")
            mine = await client.client_id()
            async with aioredis.Redis.from_url(redis_url) as admin:
                await admin.client_kill_filter(_id=mine)
            with pytest.raises(RedisConnectionError):
                await client.get("k")
            return await client.get("k")
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == b"v"


def test_a_write_redis_does_not_read_fails_within_the_timeout(
    make_redis_server: Callable[..., RedisServer],
) -> None:
    server = make_redis_server(persist=False)
    assert server.pid is not None

    async def scenario() -> float:
        client = redis_client(Settings(redis_url=server.url, redis_timeout_s=1.0))
        mine = await client.client_id()
        os.kill(server.pid, signal.SIGSTOP)  # a hung Redis: nothing is read any more
        try:
            started = time.monotonic()
            with pytest.raises(RedisTimeoutError):
                await client.set("big", b"z" * BIG)
            return time.monotonic() - started
        finally:
            os.kill(server.pid, signal.SIGCONT)
            # The closed connection still holds its unsent bytes: once Redis reads them, it
            # goes (and its socket with it, before the loop ends).
            async with aioredis.Redis.from_url(server.url) as admin:
                for _ in range(200):
                    if mine not in {int(c["id"]) for c in await admin.client_list()}:
                        break
                    await asyncio.sleep(0.05)
            await client.aclose()

    assert asyncio.run(scenario()) < 30  # bounded by the timeout, not hung
