"""Every failed pipeline refreshes the cluster client's slot map: a client that reaches a master
only through pipelines (the heartbeat, a model's description) finds its promoted replica by
itself, with the dead master left down (issue 37, item 3). Without the refresh, such a client
dials the dead master for as long as it stays down (test_cluster_failover)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio.cluster import RedisCluster

from online_ctr.learning.rules import get_rule
from online_ctr.store.failures import client_failure
from online_ctr.store.state import ModelStore, spec_from
from testkit.local_cluster import LocalCluster

pytestmark = pytest.mark.anyio

#: Generous: a failover takes 2.5-3 s on this cluster (docs/redis-cluster.md).
RECOVERY_S = 20.0


async def until_it_passes(call: Callable[[], Awaitable[object]]) -> list[str]:
    """Call until a call passes (every 0.1 s); the class of each failure before."""
    failures: list[str] = []
    deadline = time.monotonic() + RECOVERY_S
    while True:
        try:
            await call()
            return failures
        except Exception as error:
            assert client_failure(error), repr(error)
            failures.append(type(error).__name__)
        assert time.monotonic() < deadline, f"never passed: {failures[-5:]}"
        await asyncio.sleep(0.1)


async def test_pipelines_find_the_promoted_replica_of_a_master_left_down(
    redis_cluster: LocalCluster, cluster: RedisCluster
) -> None:
    rule = get_rule("ftrl")
    store = ModelStore(cluster, spec_from("m", "ftrl", rule.params(), None, 64, 8, "float64"))
    await store.ensure()
    await store.heartbeat("w1")
    victim = cluster.get_node_from_key(store.keys.workers)
    assert victim is not None
    # Keyless commands (the heartbeat's TIME) go to the default node: not the victim, so that
    # only the pipelines meet the dead master.
    cluster.set_default_node(next(n for n in cluster.get_primaries() if n.port != victim.port))
    redis_cluster.kill(int(victim.port))  # and left down

    beats = await until_it_passes(lambda: store.heartbeat("w1"))
    described = await until_it_passes(store.info)
    assert victim.port not in redis_cluster.running()
    assert beats and set(beats) <= {"ConnectionError", "ClusterDownError"}, beats
    assert (await store.heartbeat_age() or 0.0) < 1.0
    new = cluster.get_node_from_key(store.keys.workers)
    assert new is not None and new.port != victim.port  # the promoted replica
    print(f"heartbeat failures before the promotion was seen: {len(beats)}, then {described}")
