"""``OCTR_REDIS_CLUSTER``: the client it selects, and the clear errors when it is wrong."""

from __future__ import annotations

import warnings

import pydantic
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from online_ctr.config.settings import Settings
from online_ctr.wiring import ClusterModeError, check_topology, redis_client
from service.app import create_app
from tests.cluster.conftest import TAGS

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.anyio


def test_the_setting_selects_the_client() -> None:
    url = "redis://127.0.0.1:1"
    assert isinstance(redis_client(Settings(redis_url=url, redis_cluster=True)), RedisCluster)
    assert isinstance(redis_client(Settings(redis_url=url)), aioredis.Redis)


def test_cluster_without_url_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="OCTR_REDIS_CLUSTER needs OCTR_REDIS_URL"):
        Settings(redis_url=None, redis_cluster=True)


def test_replica_acks_are_on_by_default_on_a_cluster_only() -> None:
    url = "redis://127.0.0.1:1"
    assert Settings(redis_url=url, redis_cluster=True).replicas_to_ack() == 1
    assert Settings(redis_url=url).replicas_to_ack() == 0
    assert Settings(redis_url=url, replica_acks=2).replicas_to_ack() == 2
    assert Settings(redis_url=url, redis_cluster=True, replica_acks=0).replicas_to_ack() == 0
    assert Settings(redis_url=url, redis_timeout_s=0.5).replica_ack_timeout_ms() == 250


def test_a_replica_wait_longer_than_the_redis_timeout_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="OCTR_REPLICA_ACKS_TIMEOUT_MS=1000 must"):
        Settings(redis_timeout_s=1, replica_acks_timeout_ms=1000)


async def test_check_topology_refuses_a_mismatch_both_ways(
    redis_cluster_url: str, redis_url: str
) -> None:
    await check_topology(Settings(redis_url=redis_cluster_url, redis_cluster=True))
    await check_topology(Settings(redis_url=redis_url))
    with pytest.raises(ValueError, match="Redis Cluster node: set OCTR_REDIS_CLUSTER=true"):
        await check_topology(Settings(redis_url=redis_cluster_url))
    with pytest.raises(ValueError, match="unset OCTR_REDIS_CLUSTER"):
        await check_topology(Settings(redis_url=redis_url, redis_cluster=True))


async def test_plain_client_on_a_cluster_names_the_setting_at_the_first_moved(
    redis_cluster_url: str,
) -> None:
    client = redis_client(Settings(redis_url=redis_cluster_url))
    try:
        # Keys of the URL's node succeed; the first key of another node is MOVED.
        with pytest.raises(ClusterModeError, match=r"MOVED \d+ .* set OCTR_REDIS_CLUSTER=true"):
            for key in TAGS:
                await client.set(key, 1)
        pipe = client.pipeline(transaction=False)
        for key in TAGS:
            pipe.set(key, 1)
        with pytest.raises(ClusterModeError, match="set OCTR_REDIS_CLUSTER=true"):
            await pipe.execute()
    finally:
        await client.aclose()


async def test_cluster_client_on_a_plain_redis_fails_at_discovery(redis_url: str) -> None:
    client = redis_client(Settings(redis_url=redis_url, redis_cluster=True))
    try:
        with pytest.raises(RedisClusterException, match="Cluster mode is not enabled"):
            await client.get("key")
    finally:
        await client.aclose()


def test_api_refuses_to_start_on_a_cluster_without_the_setting(redis_cluster_url: str) -> None:
    app = create_app(Settings(redis_url=redis_cluster_url, auth="off"), CollectorRegistry())
    with pytest.raises(ValueError, match="set OCTR_REDIS_CLUSTER=true"), TestClient(app):
        pass
