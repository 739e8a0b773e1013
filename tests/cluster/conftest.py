"""Fixtures for the Redis Cluster tests: a cluster client on the (emptied) session cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from online_ctr.config.settings import Settings
from online_ctr.wiring import redis_client

#: A read-modify-write on one key, as the store's scripts do.
INCR_META = "return redis.call('HINCRBY', KEYS[1], 'n', ARGV[1])"
#: 64 hash tags: with 3 masters, every master owns some of them.
TAGS = [f"octr:{{m/{n}}}:meta" for n in range(64)]


async def evalsha_all(client: RedisCluster, sha: str, raise_on_error: bool = True) -> list[Any]:
    """One non-transactional pipeline: the script once on each of the 64 tags."""
    pipe = client.pipeline(transaction=False)
    for key in TAGS:
        pipe.execute_command("EVALSHA", sha, 1, key, 1)
    return await pipe.execute(raise_on_error=raise_on_error)


def owner(client: RedisCluster, key: str) -> int:
    """Port of the master that serves ``key``, as the client's slot map says."""
    node = client.get_node_from_key(key)
    assert node is not None
    return int(node.port)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def cluster(redis_cluster_url: str) -> AsyncIterator[RedisCluster]:
    """The client ``OCTR_REDIS_CLUSTER=true`` gives, with the slot map already fetched."""
    client = redis_client(Settings(redis_url=redis_cluster_url, redis_cluster=True))
    assert isinstance(client, RedisCluster)
    await client.initialize()
    yield client
    await client.aclose()


# The real API and worker processes, as the integration tests start them.
from tests.integration.conftest import start_service  # noqa: E402, F401
