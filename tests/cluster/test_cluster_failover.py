"""A master SIGKILLed under the cluster client (no retries, node timeout 1 s): the call in
flight, pipelines, and how long the dead master's slots go unserved."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from online_ctr.config.settings import Settings
from online_ctr.wiring import redis_client
from testkit.local_cluster import LocalCluster
from tests.cluster.conftest import INCR_META, TAGS, evalsha_all, owner

pytestmark = pytest.mark.anyio

Timeline = list[tuple[float, str, str]]


async def blocked_in(port: int, command: str, timeout_s: float = 5.0) -> None:
    """Wait until a client of the node on ``port`` is blocked in ``command``."""
    deadline = time.monotonic() + timeout_s
    with redis.Redis(port=port) as probe:
        while not any(
            client["cmd"] == command and "b" in client["flags"] for client in probe.client_list()
        ):
            assert time.monotonic() < deadline, f"no client blocked in {command}"
            await asyncio.sleep(0.01)


async def outcome(call: asyncio.Future[object] | object) -> str:
    try:
        await call  # type: ignore[misc]
    except redis.RedisError as error:
        return type(error).__name__
    return "ok"


async def until_served(client: RedisCluster, dead: str, alive: str, since: float) -> Timeline:
    """Read a key of the dead master and one of a live master until the first is served
    again: (seconds since ``since``, outcome of the first, outcome of the second)."""
    timeline: Timeline = []
    while not timeline or timeline[-1][1] != "ok":
        assert time.monotonic() - since < 15, f"no failover: {timeline}"
        dead_outcome = await outcome(client.hget(dead, "n"))
        alive_outcome = await outcome(client.hget(alive, "n"))
        timeline.append((time.monotonic() - since, dead_outcome, alive_outcome))
        await asyncio.sleep(0.05)
    return timeline


async def hget_all(client: RedisCluster, keys: list[str]) -> list[object]:
    """Field ``n`` of each key, in one read-only pipeline."""
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hget(key, "n")
    return await pipe.execute(raise_on_error=False)


async def kill_during_blpop(cluster: LocalCluster, client: RedisCluster, key: str) -> float:
    """SIGKILL the master of ``key`` while ``client`` waits on it in BLPOP; the kill time."""
    port = owner(client, key)
    in_flight = asyncio.ensure_future(client.blpop([key + ":queue"], timeout=0.9))
    await blocked_in(port, "blpop")
    killed = time.monotonic()
    cluster.kill(port)
    with pytest.raises(redis.ConnectionError, match="Connection closed by server"):
        await in_flight
    return killed


async def test_killed_master_fails_over_within_seconds(
    redis_cluster: LocalCluster, redis_cluster_url: str
) -> None:
    settings = Settings(redis_url=redis_cluster_url, redis_cluster=True)
    client, piped = redis_client(settings), redis_client(settings)
    assert isinstance(client, RedisCluster) and isinstance(piped, RedisCluster)
    try:
        await client.initialize()
        sha = await client.script_load(INCR_META)
        assert await evalsha_all(piped, sha) == [1] * 64
        ports = {key: owner(client, key) for key in TAGS}
        victim = next(port for port in ports.values() if port != redis_cluster.ports[0])
        dead = [key for key in TAGS if ports[key] == victim]
        alive = [key for key in TAGS if ports[key] != victim]
        killed = await kill_during_blpop(redis_cluster, client, dead[0])

        # On its open connection to the dead master, a pipeline gets an error per command
        # there, and the live masters' share is done.
        results = dict(zip(TAGS, await evalsha_all(piped, sha, raise_on_error=False), strict=True))
        assert all(isinstance(results[key], redis.ConnectionError) for key in dead), results
        assert [results[key] for key in alive] == [2] * len(alive)
        # Once it must dial the dead master, the whole pipeline raises, even with
        # raise_on_error=False (the live masters' share is still done, results unseen).
        with pytest.raises(redis.ConnectionError, match=f"connecting to 127.0.0.1:{victim}"):
            await evalsha_all(piped, sha, raise_on_error=False)

        timeline = await until_served(client, dead[0], alive[0], killed)
        assert {dead for _, dead, _ in timeline[:-1]} <= {"ConnectionError", "ClusterDownError"}
        # Keys of live masters fail too: CLUSTERDOWN while the cluster state is "fail", and a
        # ConnectionError when a rediscovery sends COMMAND to the dead master.
        assert {alive for _, _, alive in timeline} <= {"ok", "ClusterDownError", "ConnectionError"}
        assert 1.0 < timeline[-1][0] < 10.0, timeline

        # Single commands found the new master by themselves; a client that only ran
        # pipelines still dials the dead one, until aclose() makes it rediscover the slots.
        with pytest.raises(redis.ConnectionError, match=f"connecting to 127.0.0.1:{victim}"):
            await hget_all(piped, TAGS)
        await piped.aclose()
        assert await hget_all(piped, alive) == [b"3"] * len(alive)
        # The promoted replica never got SCRIPT LOAD: scripts are not replicated.
        results = dict(zip(TAGS, await evalsha_all(piped, sha, raise_on_error=False), strict=True))
        assert all(isinstance(results[key], NoScriptError) for key in dead), results

        redis_cluster.heal()  # what the next test's fixture would do
        assert victim in redis_cluster.running()
        assert victim not in redis_cluster.master_ports()  # back, as a replica
    finally:
        await client.aclose()
        await piped.aclose()
