"""With OCTR_REPLICA_ACKS on, /learn answers 202 only once a replica holds the append (issue 37,
item 1): the real app on a real Redis with a real replica. A stalled replica makes it a 503
that says the request may have been accepted; the retry with the same Idempotency-Key, once
the replica is back, is a replay, and the examples are in the stream once."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from httpx import Response
from prometheus_client import CollectorRegistry

from online_ctr.cli.embedded import RedisServer
from service.app import create_app
from testkit.ports import free_port
from tests.service.keys import HEADERS
from tests.service.test_api_faults import LEARN, settings_for

pytestmark = pytest.mark.processes

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


@pytest.fixture
def replica(redis_server: RedisServer, redis_url: str, tmp_path: Path) -> Iterator[int]:
    """A replica of the test Redis, attached and in sync; its process id."""
    server = shutil.which("redis-server")
    assert server is not None
    port = free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp_path],
        stdout=subprocess.DEVNULL,
    )
    try:
        with redis.Redis(port=port, socket_timeout=1) as client:
            until(lambda: bool(client.ping()), "the replica to start")
            client.replicaof("127.0.0.1", redis_server.port)
            until(lambda: client.info("replication")["master_link_status"] == "up", "a sync")
        yield process.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
        process.kill()
        process.wait()


def accepted(client: TestClient, headers: dict[str, str] | None = None) -> Response:
    """A /learn sent again while its replica wait times out (the replica catching up on a
    busy machine), until it is accepted; its last answer."""
    deadline = time.monotonic() + 30.0
    while (answer := client.post("/learn", json=LEARN, headers=headers)).status_code == 503:
        assert "OCTR_REPLICA_ACKS_TIMEOUT_MS" in answer.text, answer.text
        assert time.monotonic() < deadline, "the replica never caught up"
        time.sleep(0.1)
    return answer


def until(check: object, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(redis.RedisError):
            if check():  # type: ignore[operator]
                return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_learn_is_accepted_only_once_a_replica_holds_it(
    redis_server: RedisServer, replica: int
) -> None:
    settings = settings_for(redis_server, replica_acks=1, replica_acks_timeout_ms=200)
    registry = CollectorRegistry()
    key = {"Idempotency-Key": "first-request"}
    with TestClient(create_app(settings, registry), headers=HEADERS) as client:
        # Keyed, so that its retries while the replica attaches (a busy machine) append once:
        # a 503 there had already appended, and the count below was off by the retries.
        assert accepted(client, {"Idempotency-Key": "warm-up"}).status_code == 202
        waits = registry.get_sample_value(
            "online_ctr_replica_ack_timeouts_total", {"waited": "learn"}
        )
        os.kill(replica, signal.SIGSTOP)
        try:
            stalled = client.post("/learn", json=LEARN, headers=key)
        finally:
            os.kill(replica, signal.SIGCONT)
        assert stalled.status_code == 503, stalled.text
        assert stalled.headers["Retry-After"] == "3"
        detail = stalled.json()["detail"]
        assert "OCTR_REPLICA_ACKS_TIMEOUT_MS" in detail and "same Idempotency-Key" in detail
        after = registry.get_sample_value(
            "online_ctr_replica_ack_timeouts_total", {"waited": "learn"}
        )
        assert (after or 0) - (waits or 0) == 1
        retried = accepted(client, key)
        assert retried.status_code == 202, retried.text
        assert retried.headers["Idempotent-Replayed"] == "true"
    with redis.Redis.from_url(settings.redis_url or "") as plain:
        assert plain.xlen("octr:{default}:stream") == 2  # the stalled request's once
