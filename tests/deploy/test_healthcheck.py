"""The image's health-check script, against a real HTTP server on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "healthcheck.py"


class _Handler(BaseHTTPRequestHandler):
    """Answers /healthz with 200 and anything else with 503."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Keep the test output quiet."""


@pytest.fixture
def server_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_healthy_on_2xx(server_url: str) -> None:
    assert probe(f"{server_url}/healthz").returncode == 0


def test_unhealthy_on_error_status(server_url: str) -> None:
    result = probe(f"{server_url}/readyz")
    assert result.returncode == 1
    assert "503" in result.stderr


def test_unhealthy_when_nothing_listens() -> None:
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
    # The port was just free and is closed again: the connection is refused.
    assert probe(f"http://127.0.0.1:{port}/healthz").returncode == 1
