"""Snapshot uploads at the edge (issue 31, part 4): only the snapshot route escapes the body
limit, an upload has one deadline however steadily it trickles in, and a client that goes
away mid-upload is one line in the log, not a traceback (on a real ``online-ctr api``)."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.rules import get_rule
from online_ctr.learning.snapshot import Footer, Header
from online_ctr.learning.snapshot_writer import Writer
from service.app import create_app
from testkit.ports import free_port
from tests.service.keys import ADMIN_KEY, AUTH, HEADERS
from tests.service.test_commands import ROOT
from tests.service.test_snapshot_refusals import keys_of

pytestmark = pytest.mark.processes

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


def test_only_the_snapshot_route_escapes_the_body_limit(
    redis_url: str, registry: CollectorRegistry
) -> None:
    # PUT /models/snapshot is PUT /models/{name} (a JSON body): it ended in /snapshot, so it
    # was read whole whatever its size.
    settings = Settings(redis_url=redis_url, max_body_bytes=1024, **AUTH)
    with TestClient(create_app(settings, registry), headers=HEADERS) as client:
        body = b'{"rule": "ftrl"' + b" " * 2048 + b"}"
        json = {"content-type": "application/json"}
        assert client.put("/models/snapshot", content=body, headers=json).status_code == 413


def snapshot(rows: int) -> bytes:
    """A valid FTRL snapshot of ``rows`` features (in chunks of MAX_ROWS)."""
    rule = get_rule("ftrl")
    state = np.column_stack((np.zeros(rows), np.ones(rows)))
    writer = Writer()
    blob = writer.start(Header("ftrl", dict(vars(rule.params())), None, rule.fields))
    blob += writer.rows(np.arange(rows, dtype=np.uint64), state)
    return blob + writer.finish(
        Footer(t=1, logloss_sum=0.5, nonzero_weights=0, features_tracked=rows)
    )


@pytest.fixture
def api(redis_url: str, tmp_path: Path) -> Iterator[tuple[tuple[str, int], Path]]:
    """A real ``online-ctr api`` whose uploads have 3 s in all, 2 s per piece; its log."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.update(
        PYTHONPATH=str(ROOT),
        OCTR_REDIS_URL=redis_url,
        OCTR_PORT=str(port),
        OCTR_BODY_TIMEOUT_S="2",
        OCTR_UPLOAD_TIMEOUT_S="3",
        OCTR_API_KEYS=AUTH["api_keys"].get_secret_value(),
    )
    log_path = tmp_path / "api.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "online_ctr.cli.main", "api"], env=environment, stderr=log
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None, "api did not start"
                time.sleep(0.05)
        yield ("127.0.0.1", port), log_path
    finally:
        process.terminate()
        process.wait(15)


def upload_head(name: str, length: int) -> bytes:
    return (
        f"PUT /models/{name}/snapshot HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {ADMIN_KEY}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_trickled_upload_has_one_deadline(api: tuple[tuple[str, int], Path]) -> None:
    # Issue 31: one byte every 4 s kept an upload open indefinitely (each piece had its own
    # 10 s). Here one byte every 0.2 s, well within the 2 s per piece, for 2.6 s: without the
    # one deadline the answer would be the 2 s piece timeout at 4.6 s, naming
    # OCTR_BODY_TIMEOUT_S. The trickle stops short of the 3 s deadline so that no byte is in
    # flight when the server closes after its 408: a byte that reaches a closed socket makes
    # the kernel answer with a reset, which can drop the 408 before it is read.
    blob = snapshot(10)
    with socket.create_connection(api[0], timeout=10) as raw:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.monotonic()
        raw.sendall(upload_head("trickle", len(blob)))
        answer = b""
        for byte in blob[:60]:
            if time.monotonic() - started > 2.6:
                break
            raw.sendall(bytes([byte]))
            if select.select([raw], [], [], 0.2)[0]:
                break
        while chunk := raw.recv(4096):  # the answer, then the server closes
            answer += chunk
        took = time.monotonic() - started
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", answer
    assert b"did not complete within 3s (OCTR_UPLOAD_TIMEOUT_S)" in rest
    assert 2.9 < took < 10


def test_a_client_gone_mid_upload_is_one_log_line(
    api: tuple[tuple[str, int], Path], redis_url: str
) -> None:
    # Issue 31: an abandoned upload logged "Exception in ASGI application" and a traceback.
    blob = snapshot(70_000)  # two chunks: the first is written before the client goes
    with socket.create_connection(api[0], timeout=10) as raw:
        raw.sendall(upload_head("abandoned", len(blob)) + blob[: len(blob) * 3 // 4])
        time.sleep(0.5)
    log_path = api[1]
    deadline = time.monotonic() + 15
    while b"disconnected" not in log_path.read_bytes() and time.monotonic() < deadline:
        assert b"Exception in ASGI application" not in log_path.read_bytes()
        time.sleep(0.1)
    log = log_path.read_text()
    lines = [line for line in log.splitlines() if "disconnected" in line]
    assert len(lines) == 1, log
    assert "PUT /models/{name}/snapshot: the client disconnected" in lines[0]
    assert "Traceback" not in log and "Exception in ASGI application" not in log
    deadline = time.monotonic() + 5
    while keys_of(redis_url, "abandoned") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert keys_of(redis_url, "abandoned") == []  # what was written is deleted
