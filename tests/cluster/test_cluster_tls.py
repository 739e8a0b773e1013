"""A Redis Cluster whose nodes speak only TLS (to clients, to their replicas and on the
cluster bus), learned through the real API and workers end to end; and a CA it does not
know, said in one line."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from online_ctr.learning.readers import read_examples
from testkit.local_cluster import LocalCluster
from testkit.paths import CRITEO
from testkit.ports import free_port
from testkit.tls import Certificates
from tests.cluster.test_cluster_learning import learn_all, step
from tests.integration.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 1_000))


def test_a_tls_cluster_learns_end_to_end(
    redis_tls_cluster: LocalCluster, tls_certificates: Certificates, start_service: Any
) -> None:
    assert redis_tls_cluster.url.startswith("rediss://")
    service = start_service(
        redis_tls_cluster.url,
        workers=2,
        OCTR_REDIS_CLUSTER="true",
        OCTR_BATCH_SIZE="128",
        **tls_certificates.settings(),
    )
    features = ROWS[0][0]
    learn_all(service, ROWS)
    wait_until(lambda: step(service) == len(ROWS), 60, "the workers to learn", service.logs)
    reply = httpx.post(f"{service.api_url}/predict", json={"features": features}, timeout=5)
    assert reply.json()["probability"] != 0.5, reply.text
    # The model's state is spread over every master, each reached over TLS.
    masters = redis_tls_cluster.master_ports()
    assert len(masters) == 3
    for port in masters:
        with redis_tls_cluster.node_client(port, timeout_s=2) as node:
            assert next(node.scan_iter(match="octr:{default/*}:b:*", count=1000), None)
    assert "Traceback" not in service.logs()


@pytest.mark.processes
def test_a_tls_cluster_with_an_unknown_ca_is_one_line(
    redis_tls_cluster: LocalCluster, tls_certificates: Certificates, tmp_path: Path
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(
        PYTHONPATH=str(ROOT),
        OCTR_REDIS_URL=redis_tls_cluster.url,
        OCTR_REDIS_CLUSTER="true",
        OCTR_REDIS_TLS_CA_FILE=str(tls_certificates.stranger_ca),
        OCTR_WORKER_METRICS_PORT=str(free_port()),
    )
    done = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", "worker"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"Redis at 127.0.0.1:{redis_tls_cluster.ports[0]} (OCTR_REDIS_URL)" in done.stderr
    assert "not signed by a CA of OCTR_REDIS_TLS_CA_FILE" in done.stderr
