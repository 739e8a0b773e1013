"""A master SIGKILLed and left down: its replica is promoted, and the API and the learners go on
without a restart, because every failed pipeline refreshes the cluster client's slot map
(``online_ctr.store.failures``). Before, a learner whose heartbeat pipeline kept dialling the
dead master could stall until the node came back (issue 37, item 3)."""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import httpx
from redis.cluster import RedisCluster

from online_ctr.learning.readers import read_examples
from testkit.local_cluster import LocalCluster
from testkit.paths import CRITEO
from tests.integration.conftest import Service, wait_until

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))
BODY = 50  # examples per /learn request
#: Generous: a failover takes 2.5-3 s on this cluster (docs/redis-cluster.md).
RECOVERY_S = 30.0


def learn_all(client: httpx.Client, rows: list[tuple[dict[str, Any], int]]) -> int:
    """Send ``rows``, each body retried with its Idempotency-Key until it is answered 202
    (a 503 while the cluster fails over); the examples accepted."""
    for start in range(0, len(rows), BODY):
        examples = [{"features": x, "label": y} for x, y in rows[start : start + BODY]]
        key = {"Idempotency-Key": str(uuid.uuid4())}
        deadline = time.monotonic() + RECOVERY_S
        while True:
            try:
                reply = client.post("/learn", json={"examples": examples}, headers=key)
            except httpx.TransportError:
                reply = None
            if reply is not None and reply.status_code == 202:
                break
            assert reply is None or reply.status_code == 503, reply.text
            assert time.monotonic() < deadline, "the API did not recover from the failover"
            time.sleep(0.1)
    return len(rows)


def model(service: Service) -> dict[str, Any]:
    reply = httpx.get(f"{service.api_url}/models/default", timeout=5)
    assert reply.status_code in (200, 503), reply.text
    return dict(reply.json()) if reply.status_code == 200 else {}


def test_learning_resumes_with_a_dead_master_left_down(
    redis_cluster: LocalCluster, redis_cluster_url: str, start_service: Any
) -> None:
    service = start_service(
        redis_cluster_url,
        workers=2,
        OCTR_REDIS_CLUSTER="true",
        OCTR_BATCH_SIZE="256",
        OCTR_LEASE_TTL_MS="1000",
    )
    with httpx.Client(base_url=service.api_url, timeout=5) as client:
        accepted = learn_all(client, ROWS[:1_000])
        wait_until(lambda: model(service).get("global_step") == accepted, 30, "learning")
        with RedisCluster.from_url(redis_cluster_url) as probe:
            # The master of the model's log side: its step, stream, redo log, lease and the
            # workers' heartbeats.
            node = probe.get_node_from_key("octr:{default}:meta")
            assert (
                node is not None
                and node.port == probe.get_node_from_key("octr:{default}:workers").port
            )
        killed = time.monotonic()
        redis_cluster.kill(node.port)  # and left down
        accepted += learn_all(client, ROWS[1_000:])
    wait_until(
        lambda: model(service).get("global_step") == accepted,
        RECOVERY_S,
        f"learning to resume with a master down\n{service.logs()}",
    )
    recovered_s = time.monotonic() - killed
    info = model(service)
    assert node.port not in redis_cluster.running()  # never restarted
    assert all(process.poll() is None for process in service.processes.values())
    # Every accepted example learned once: t counts each, and nothing is left or dead.
    assert (info["global_step"], info["stream_lag"], info["dead_letters"]) == (len(ROWS), 0, 0)
    assert recovered_s < RECOVERY_S
    print(f"learned {len(ROWS)} examples, {recovered_s:.1f} s after the kill")
