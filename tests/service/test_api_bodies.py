"""Malformed bodies get a documented 4xx with an actionable message: invalid UTF-8, compressed
bodies, very deep JSON, lone surrogates, and a body shorter than its Content-Length (on a real
``online-ctr api``, through a raw socket)."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from online_ctr.config.settings import Settings
from testkit.ports import free_port
from tests.service.keys import ADMIN_KEY, AUTH
from tests.service.test_commands import ROOT

pytestmark = pytest.mark.processes

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

JSON = {"content-type": "application/json"}
DEEP = b"[" * 10_000 + b"]" * 10_000
CASES = [
    (
        b'{"features": {"a": "\xff"}}',
        {},
        422,
        "body",
        "is not valid UTF-8 (byte 0xff at offset 20)",
    ),
    (DEEP, {}, 422, "body", "nests too deeply to parse"),
    (b'{"features": {"a": "\\ud800"}}', {}, 422, "features.a", "lone surrogate"),
    (b'{"features": {"a": ["\\udc00"]}}', {}, 422, "features.a[0]", "lone surrogate"),
    (b'{"features": {"\\ud800": "x"}}', {}, 422, None, "field names must be valid text"),
    # mtime=0: the same bytes in every pytest process (xdist checks they all collect one list).
    (
        gzip.compress(b'{"features": {"a": "b"}}', mtime=0),
        {"content-encoding": "gzip"},
        415,
        None,
        "gzip",
    ),
    (
        b'{"features": {"a": "b"}}',
        {"content-encoding": "br"},
        415,
        None,
        "send the JSON body uncompressed",
    ),
]


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, **AUTH)


@pytest.mark.parametrize("path", ["/predict", "/learn"])
@pytest.mark.parametrize(("body", "headers", "status", "field", "message"), CASES)
def test_bad_bodies(
    client: TestClient,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    field: str | None,
    message: str,
) -> None:
    if path == "/learn" and body.startswith(b'{"features"') and status == 422:
        body = body[:-1] + b', "label": 1}'
    reply = client.post(path, content=body, headers={**JSON, **headers})
    assert reply.status_code == status, reply.text
    assert message in reply.json()["detail"]
    if field is not None:
        assert reply.json()["errors"][0]["field"] == field
    responses = client.get("/openapi.json").json()["paths"][path]["post"]["responses"]
    assert str(status) in responses  # documented


def test_duplicate_keys_are_documented(client: TestClient) -> None:
    reply = client.post("/predict", content=b'{"features": {"a": "x", "a": "y"}}', headers=JSON)
    assert reply.status_code == 200  # the last value counts, as documented
    responses = client.get("/openapi.json").json()["paths"]["/predict"]["post"]["responses"]
    assert "its last value counts" in responses["422"]["description"]


@pytest.fixture
def api_url(redis_url: str, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A real ``online-ctr api`` with a 1 s body timeout."""
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.update(
        PYTHONPATH=str(ROOT),
        OCTR_REDIS_URL=redis_url,
        OCTR_PORT=str(port),
        OCTR_BODY_TIMEOUT_S="1",
        OCTR_API_KEYS=AUTH["api_keys"].get_secret_value(),
    )
    with (tmp_path / "api.log").open("wb") as log:
        api = subprocess.Popen(
            [sys.executable, "-m", "online_ctr.cli.main", "api"], env=environment, stderr=log
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline and api.poll() is None, "api did not start"
                time.sleep(0.05)
        yield "127.0.0.1", port
    finally:
        api.terminate()
        api.wait(15)


def test_a_body_shorter_than_its_content_length_times_out(api_url: tuple[str, int]) -> None:
    head = (
        "POST /learn HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {ADMIN_KEY}\r\nContent-Length: 100\r\n\r\n"
    )
    with socket.create_connection(api_url, timeout=10) as raw:
        started = time.monotonic()
        raw.sendall(head.encode() + b'{"features": ')
        answer = b""
        while chunk := raw.recv(4096):  # until the server closes the connection
            answer += chunk
        took = time.monotonic() - started
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 408 Request Timeout", answer
    assert b"did not arrive within 1s (OCTR_BODY_TIMEOUT_S)" in rest
    assert 0.9 < took < 5
