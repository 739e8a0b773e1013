"""``online-ctr serve`` with flags, seen by ``online-ctr status``: where each part runs, that it
answers, and no password on the screen."""

from __future__ import annotations

import contextlib
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from online_ctr.cli.embedded import RedisServer
from online_ctr.cli.status import redis_answers
from testkit.ports import free_port, free_ports

pytestmark = pytest.mark.processes


ROOT = Path(__file__).resolve().parents[2]


def environment() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    clean.pop("REDIS_URL", None)
    return {**clean, "PYTHONPATH": str(ROOT), "OCTR_AUTH": "off"}


def status(data: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "online_ctr.cli.main", "status", "--data-dir", str(data)]
    return subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=30)


def wait_healthy(
    data: Path, serve: subprocess.Popen[bytes], log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``status`` once it answers 0; fails with serve's log (``log``) if serve exits first."""
    deadline = time.monotonic() + 60
    while True:
        if serve.poll() is not None:
            said = log.read_text(errors="replace")[-4000:] if log else ""
            raise AssertionError(f"serve exited with {serve.returncode}:\n{said}")
        done = status(data)
        if done.returncode == 0:
            return done
        assert time.monotonic() < deadline, done.stdout
        time.sleep(0.3)


def test_status_shows_where_serve_runs(tmp_path: Path) -> None:
    # Two workers: their /metrics listen on `metrics` and `metrics + 1`.
    port, redis_port = free_ports(2)
    metrics = free_ports(2, consecutive=True)[0]  # two workers: /metrics on it and the next
    data = tmp_path / "data"
    argv = ["serve", "--port", str(port), "--data-dir", str(data), "--workers", "2",
            "--log-level", "warning"]  # fmt: skip
    env = {**environment(), "OCTR_EMBEDDED_REDIS_PORT": str(redis_port),
           "OCTR_WORKER_METRICS_PORT": str(metrics)}  # fmt: skip
    with (tmp_path / "serve.log").open("wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "online_ctr.cli.main", *argv],
            env=env, cwd=tmp_path, stderr=log, start_new_session=True,
        )  # fmt: skip
    try:
        out = wait_healthy(data, serve, tmp_path / "serve.log").stdout
        assert f"pid {serve.pid}, running" in out
        assert f"http://127.0.0.1:{port}: answers" in out
        assert f"redis://127.0.0.1:{redis_port}/0 (embedded): answers" in out
        for worker_port in (metrics, metrics + 1):
            assert f"http://127.0.0.1:{worker_port}/metrics: answers" in out
        assert (data / "redis-password").read_text().strip() not in out
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(30) == 0
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
    # --log-level warning: the children's info lines are not logged.
    assert " INFO " not in (tmp_path / "serve.log").read_text()
    stopped = status(data)
    assert stopped.returncode == 1
    assert "not running" in stopped.stdout and "does not answer" in stopped.stdout
    assert "stopped with serve" in stopped.stdout

    # Another checkout's serve now holds the same ports: status says its parts are not this
    # directory's, where it used to report that Redis and API as if they were.
    other_redis = RedisServer(tmp_path / "other", port=redis_port, persist=False, password="x" * 20)
    with other_redis, answering_healthz(port):
        other = status(data)
    assert other.returncode == 1
    redis_line = f"redis://127.0.0.1:{redis_port}/0 (embedded): stopped with serve; another"
    api_line = f"http://127.0.0.1:{port}: stopped with serve; another process answers there"
    assert redis_line in other.stdout and api_line in other.stdout, other.stdout
    assert ": answers" not in other.stdout, other.stdout


@contextlib.contextmanager
def answering_healthz(port: int) -> Iterator[None]:
    """An HTTP server on ``port`` answering 200 to everything, as another API would."""

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_redis_answers_tells_a_missing_password_from_no_answer(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", port=free_port(), persist=False, password="pw-0123") as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        assert redis_answers(url, None) == "answers (needs a password)"
        assert redis_answers(url, "pw-0123") == "answers"
    assert redis_answers(f"redis://127.0.0.1:{free_port()}/0", None) == "does not answer"
