"""The real API, worker and command line over TLS to a real ``redis-server`` that speaks only
TLS (``--port 0 --tls-port P``), with certificates the tests make (:mod:`testkit.tls`): learning
and predicting end to end, with a client certificate (mutual TLS), ``online-ctr serve``,
``status`` and ``models list``, and a Redis restarted while the service learns."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from online_ctr.learning.readers import read_examples
from testkit.paths import CRITEO
from testkit.ports import free_port
from testkit.tls import Certificates, TlsRedisServer
from tests.integration.conftest import Service, wait_until
from tests.integration.test_service_end_to_end import model, worker_sample

ROOT = Path(__file__).resolve().parents[2]
ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 600))
BODY = 20  # examples per /learn request


def body(start: int) -> dict[str, Any]:
    return {"examples": [{"features": x, "label": y} for x, y in ROWS[start : start + BODY]]}


def learn_and_predict(service: Service, rows: int) -> None:
    """Learn the first ``rows`` rows, wait for the worker, and see a prediction move."""
    features = ROWS[0][0]
    before = httpx.post(f"{service.api_url}/predict", json={"features": features}, timeout=5)
    assert before.json()["probability"] == 0.5, before.text
    for start in range(0, rows, BODY):
        reply = httpx.post(f"{service.api_url}/learn", json=body(start), timeout=5)
        assert reply.status_code == 202, reply.text
    wait_until(lambda: model(service)["global_step"] == rows, what=f"learning\n{service.logs()}")
    after = httpx.post(f"{service.api_url}/predict", json={"features": features}, timeout=5)
    assert after.json()["probability"] != 0.5
    assert "Traceback" not in service.logs()


def test_the_api_and_the_worker_learn_and_predict_over_tls(
    make_tls_redis: Callable[..., TlsRedisServer],
    tls_certificates: Certificates,
    start_service: Any,
) -> None:
    server = make_tls_redis()
    assert server.url.startswith("rediss://")
    service = start_service(server.url, OCTR_BATCH_SIZE="16", **tls_certificates.settings())
    learn_and_predict(service, 200)
    with server.client(timeout_s=2) as client:  # the model is in the TLS Redis
        assert int(client.hget("octr:{default}:meta", "t") or 0) == 200
    assert worker_sample(service.worker_metrics_urls[0], "online_ctr_learned_examples_total") == 200


def test_mutual_tls_with_a_client_certificate(
    make_tls_redis: Callable[..., TlsRedisServer],
    tls_certificates: Certificates,
    start_service: Any,
) -> None:
    server = make_tls_redis(mutual=True)
    service = start_service(server.url, **tls_certificates.settings(mutual=True))
    learn_and_predict(service, 100)


def online_ctr(argv: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``online-ctr ARGV`` to its end in a clean environment plus ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(PYTHONPATH=str(ROOT), OCTR_DATA_DIR=str(tmp_path / "data"), **env)
    return subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )


@pytest.mark.processes
def test_serve_status_and_models_list_over_mutual_tls(
    make_tls_redis: Callable[..., TlsRedisServer],
    tls_certificates: Certificates,
    tmp_path: Path,
) -> None:
    """``serve`` with an external TLS Redis passes the TLS settings to its API and worker;
    ``status`` and ``models list`` find that Redis in ``serve.json`` and speak TLS to it."""
    server = make_tls_redis(mutual=True)
    tls = tls_certificates.settings(mutual=True)
    api_port = free_port()
    serve_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OCTR_")},
        "PYTHONPATH": str(ROOT),
        "OCTR_DATA_DIR": str(tmp_path / "data"),
        "OCTR_REDIS_URL": server.url,
        "OCTR_PORT": str(api_port),
        "OCTR_WORKER_METRICS_PORT": str(free_port()),
        "OCTR_AUTH": "off",
        "OCTR_LOG_LEVEL": "warning",
        **tls,
    }
    with (tmp_path / "serve.log").open("wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "online_ctr.cli.main", "serve"],
            env=serve_env,
            cwd=tmp_path,
            stderr=log,
            start_new_session=True,
        )

    def status() -> subprocess.CompletedProcess[str]:
        return online_ctr(["status"], tmp_path, **tls)

    try:
        wait_until(
            lambda: serve.poll() is None and status().returncode == 0,
            120,
            "serve to be healthy",
            lambda: (tmp_path / "serve.log").read_text(errors="replace"),
        )
        assert f"{server.url} (external): answers" in status().stdout
        reply = httpx.post(f"http://127.0.0.1:{api_port}/learn", json=body(0), timeout=5)
        assert reply.status_code == 202, reply.text
        listing = online_ctr(["models", "list"], tmp_path, **tls)
        assert listing.returncode == 0, listing.stderr
        assert "default" in listing.stdout
        # Without the client certificate, status says what the server wants.
        bare = online_ctr(["status"], tmp_path, OCTR_REDIS_TLS_CA_FILE=str(tls_certificates.ca))
        assert bare.returncode == 1
        assert "does not answer: Redis at 127.0.0.1" in bare.stdout
        assert "requires a client certificate" in bare.stdout
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(30) == 0
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
    assert "Traceback" not in (tmp_path / "serve.log").read_text(errors="replace")


def send_until_accepted(service: Service, start: int, deadline_s: float = 60) -> None:
    """Send a body, again with the same Idempotency-Key while the answer is a 503 or the
    connection fails, until it is accepted."""
    key = {"Idempotency-Key": str(uuid.uuid4())}
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            reply = httpx.post(f"{service.api_url}/learn", json=body(start), headers=key, timeout=5)
            if reply.status_code == 202:
                return
            assert reply.status_code == 503, reply.text
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"no 202\n{service.logs()}"
        time.sleep(0.1)


def test_a_tls_redis_restarted_while_learning_loses_nothing_accepted(
    make_tls_redis: Callable[..., TlsRedisServer],
    tls_certificates: Certificates,
    start_service: Any,
) -> None:
    """Redis (append-only file, fsync every second) stopped by SIGTERM right after 300
    examples were accepted, and started again on its port: the API answers 503 meanwhile,
    the API and the worker reconnect over TLS by themselves, and every example accepted is
    learned once."""
    server = make_tls_redis(persist=True)
    service = start_service(
        server.url, OCTR_BATCH_SIZE="16", OCTR_BATCH_WAIT_MS="5", **tls_certificates.settings()
    )
    for start in range(0, 300, BODY):
        send_until_accepted(service, start)
    server.stop()
    reply = httpx.post(f"{service.api_url}/learn", json=body(300), timeout=10)
    assert reply.status_code == 503, reply.text
    server.start()
    for start in range(300, len(ROWS), BODY):
        send_until_accepted(service, start)
    wait_until(
        lambda: model(service)["global_step"] >= len(ROWS),
        60,
        "the worker to learn every accepted example",
        service.logs,
    )
    info = model(service)
    assert info["global_step"] == len(ROWS)
    assert info["stream_lag"] == 0 and info["dead_letters"] == 0
    metrics = service.worker_metrics_urls[0]
    learned = "online_ctr_learned_examples_total"
    wait_until(lambda: worker_sample(metrics, learned) >= len(ROWS), what="the worker's count")
    assert worker_sample(metrics, learned) == len(ROWS)
    assert "Traceback" not in service.logs()
