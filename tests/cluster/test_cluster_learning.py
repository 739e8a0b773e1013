"""One model spread over a real Redis Cluster, learned through the real API and workers, with
its learner SIGKILLed mid-run, ends exactly where a run on a single Redis ends."""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from redis.cluster import RedisCluster

from online_ctr.learning.readers import read_examples
from testkit.local_cluster import LocalCluster
from testkit.paths import CRITEO
from tests.integration.conftest import Service, wait_until

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 3_000))
BODY = 50  # examples per /learn request


def learn_all(service: Service, rows: list[tuple[dict[str, Any], int]]) -> None:
    """Send ``rows``; a body answered 503 (its replica wait timed out on a busy machine: on
    Redis Cluster /learn waits for a replica) is sent again with its Idempotency-Key."""
    with httpx.Client(base_url=service.api_url, timeout=10) as client:
        for start in range(0, len(rows), BODY):
            examples = [{"features": x, "label": y} for x, y in rows[start : start + BODY]]
            key = {"Idempotency-Key": str(uuid.uuid4())}
            deadline = time.monotonic() + 30
            while (
                reply := client.post("/learn", json={"examples": examples}, headers=key)
            ).status_code == 503:
                assert time.monotonic() < deadline, reply.text
                time.sleep(0.1)
            assert reply.status_code == 202, reply.text


def step(service: Service) -> int:
    return int(httpx.get(f"{service.api_url}/models/default", timeout=5).json()["global_step"])


def state_of(clients: list[redis.Redis]) -> dict[bytes, bytes]:
    """Every bucket field of the model, keyed by bucket key and field, over every master."""
    state: dict[bytes, bytes] = {}
    for client in clients:
        for key in client.scan_iter(match="octr:{default/*}:b:*", count=1000):
            for field, value in client.hgetall(key).items():
                state[key + b"|" + field] = value
    return state


def meta_of(client: Any) -> dict[bytes, Any]:
    """The counters; the log-loss sum is added per commit, and commits group differently."""
    meta = client.hgetall("octr:{default}:meta")
    counters: dict[bytes, Any] = {k: meta[k] for k in (b"t", b"tracked", b"nnz_stable")}
    counters[b"logloss_sum"] = pytest.approx(float(meta[b"logloss_sum"]), rel=1e-12)
    return counters


def test_a_cluster_run_with_a_killed_learner_equals_a_single_redis_run(
    redis_url: str, redis_cluster: LocalCluster, redis_cluster_url: str, start_service: Any
) -> None:
    settings = {"OCTR_BATCH_SIZE": "256", "OCTR_LEASE_TTL_MS": "1000"}
    single = start_service(redis_url, **settings)
    learn_all(single, ROWS)
    wait_until(lambda: step(single) == len(ROWS), 60, "the single-Redis run to learn it all")
    # The step moves at each finalize; the shards get the last commits' values a moment later
    # (workers/committer.py): a worker that stops applies them first.
    single.stop()
    plain = redis.Redis.from_url(redis_url)
    expected_state, expected_meta = state_of([plain]), meta_of(plain)

    service = start_service(redis_cluster_url, workers=2, OCTR_REDIS_CLUSTER="true", **settings)
    learn_all(service, ROWS[:1_000])
    wait_until(lambda: step(service) > 0, 30, "the cluster run to start learning")
    masters = [redis.Redis(port=port) for port in redis_cluster.master_ports()]
    cluster = RedisCluster.from_url(redis_cluster_url)
    leader = cluster.get("octr:{default}:lease").decode().split()[1]
    service.processes[leader].send_signal(signal.SIGKILL)  # mid-run, lease still held
    learn_all(service, ROWS[1_000:])
    wait_until(lambda: step(service) == len(ROWS), 60, f"the standby to finish\n{service.logs()}")

    assert cluster.get("octr:{default}:lease").decode().split()[1] != leader  # taken over
    service.stop()  # its last applies made, as above
    assert meta_of(cluster) == expected_meta
    state = state_of(masters)
    assert state.keys() == expected_state.keys()
    for key, value in expected_state.items():
        np.testing.assert_array_equal(np.frombuffer(state[key]), np.frombuffer(value))
    spread = [state_of([master]) for master in masters]
    assert all(spread), "the model's state did not spread over every master"
    cluster.close()
