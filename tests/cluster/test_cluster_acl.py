"""The API and the workers on a Redis Cluster as the users ``online-ctr redis-acl --cluster``
prints: learning and serving end to end, nothing they send refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from testkit.local_cluster import LocalCluster
from tests.integration.conftest import wait_until
from tests.integration.test_redis_acl import PASSWORDS, ROWS, printed_rules


@pytest.fixture
def nodes(redis_cluster: LocalCluster, redis_cluster_url: str, tmp_path: Path) -> Iterator[
    list[redis.Redis]
]:  # fmt: skip
    """A client of every node, each given the users (ACL rules are per node, not replicated)."""
    clients = [redis.Redis(port=port) for port in redis_cluster.running()]
    rules = printed_rules(tmp_path, "--cluster")
    for client in clients:
        client.execute_command("ACL", "LOG", "RESET")
        for line in rules:
            client.execute_command(*line.split())
    yield clients
    for client in clients:
        client.execute_command("ACL", "DELUSER", "octr-api", "octr-worker")
        client.close()


def test_the_api_and_the_worker_learn_and_serve_on_a_cluster_as_their_users(
    nodes: list[redis.Redis], redis_cluster_url: str, start_service: Any
) -> None:
    host = redis_cluster_url.removeprefix("redis://")
    service = start_service(
        f"redis://octr-api:{PASSWORDS['api']}@{host}",
        worker_redis_url=f"redis://octr-worker:{PASSWORDS['worker']}@{host}",
        OCTR_REDIS_CLUSTER="true",
        OCTR_FEATURE_NAMES="true",
    )
    api = service.api_url
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    reply = httpx.post(f"{api}/learn", json=body, headers={"Idempotency-Key": "k"}, timeout=10)
    assert reply.status_code == 202, reply.text
    wait_until(
        lambda: bool(httpx.get(f"{api}/models/default").json()["global_step"] == 40),
        what="the worker to learn 40 examples",
        logs=service.logs,
    )
    predicted = httpx.post(f"{api}/predict", json={"features": ROWS[0][0]})
    assert predicted.status_code == 200 and predicted.json()["probability"] != 0.5
    assert httpx.get(f"{api}/models/default/weights").status_code == 200
    refused = {(entry["username"], entry["object"]) for node in nodes for entry in node.acl_log()}
    assert refused <= {("octr-api", "setrange")}, refused
