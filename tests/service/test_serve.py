"""A real ``online-ctr serve``: it owns its data directory, protects its embedded Redis with a
generated password, and on Ctrl-C (SIGINT to the whole process group, as a terminal sends it)
stops the API and the worker before Redis, so no batch is left pending."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from online_ctr.cli.embedded import RedisServer
from online_ctr.cli.local import lock_data_dir
from online_ctr.store.keys import ModelKeys
from testkit.ports import free_port
from tests.service.test_commands import ROOT, assert_one_line, run

pytestmark = pytest.mark.processes

KEYS = ModelKeys("default")
BATCH = {
    "examples": [
        {"features": {"site": f"s{i % 7}", "n": float(i)}, "label": i % 2} for i in range(200)
    ]
}


def start_serve(tmp_path: Path, port: int) -> subprocess.Popen[bytes]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.update(
        PYTHONPATH=str(ROOT),
        OCTR_DATA_DIR=str(tmp_path / "data"),
        OCTR_PORT=str(port),
        OCTR_WORKER_METRICS_PORT=str(free_port()),
        OCTR_EMBEDDED_REDIS_PORT=str(free_port()),
        OCTR_HEARTBEAT_INTERVAL_S="0.2",
    )
    # A process group of its own, like a shell job: the test signals the group, not itself.
    with (tmp_path / "serve.log").open("wb") as log:  # the child keeps its copy
        return subprocess.Popen(
            [sys.executable, "-m", "online_ctr.cli.main", "serve"],
            env=environment,
            cwd=tmp_path,
            stderr=log,
            start_new_session=True,
        )


def wait_ready(url: str, serve: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert serve.poll() is None, f"serve exited with {serve.returncode}"
        try:
            if httpx.get(f"{url}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "serve did not become ready"
        time.sleep(0.1)


def test_serve_owns_its_data_and_stops_redis_last(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = start_serve(tmp_path, port)
    try:
        wait_ready(url, serve)
        data = tmp_path / "data"
        key = (data / "api-keys").read_text().split()[0]
        for path in ("api-keys", "redis-password"):
            assert (data / path).stat().st_mode & 0o777 == 0o600
        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.post(f"{url}/learn", json=BATCH).status_code == 401
        for _ in range(20):
            assert httpx.post(f"{url}/learn", json=BATCH, headers=headers).status_code == 202

        # A second `make run` in the same folder: same ports, all taken by the first. It is
        # told the service runs from here, not that OCTR_PORT (then a worker's port) is taken.
        record = json.loads((data / "serve.json").read_text())
        metrics_port = record["worker_metrics_urls"][0].rsplit(":", 1)[1].split("/")[0]
        redis_port = record["redis_url"].rsplit(":", 1)[1].split("/")[0]
        same = {"OCTR_PORT": str(port), "OCTR_WORKER_METRICS_PORT": metrics_port}
        second = run("serve", tmp_path, OCTR_AUTH="on", OCTR_EMBEDDED_REDIS_PORT=redis_port, **same)
        assert_one_line(second, "`online-ctr serve` is already running from", str(data))
        assert_one_line(second, f"pid {serve.pid}, API on {url}", "online-ctr status")
        assert "OCTR_PORT" not in second[1] and "OCTR_WORKER_METRICS_PORT" not in second[1]
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(30) == 0
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
    stderr = (tmp_path / "serve.log").read_text()
    assert "auth: on, a local key of every scope in" in stderr
    log = (data / "redis" / "redis.log").read_text()
    assert "Received SIGTERM" in log and "SIGINT" not in log, log[-2000:]
    os.close(lock_data_dir(data))  # released when serve and its Redis ended

    password = (data / "redis-password").read_text().strip()
    with RedisServer(data / "redis", port=free_port(), password=password) as server:
        unauthenticated = redis.Redis(port=server.port)
        with pytest.raises(redis.AuthenticationError):
            unauthenticated.ping()
        client = redis.Redis.from_url(server.url)
        learned = int(client.hget(KEYS.meta, "t") or 0)
        # Every accepted example is learned exactly once or still waiting in the stream.
        assert learned + 200 * client.xlen(KEYS.stream) == 20 * 200
        client.close()


def test_nothing_serve_started_outlives_it_when_it_is_killed(tmp_path: Path) -> None:
    port = free_port()
    serve = start_serve(tmp_path, port)
    children: list[int] = []
    try:
        wait_ready(f"http://127.0.0.1:{port}", serve)
        listed = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(serve.pid)], capture_output=True, text=True
        )
        children = [int(pid) for pid in listed.stdout.split()]
        assert len(children) == 3  # the embedded Redis, the API and a worker
        serve.send_signal(signal.SIGKILL)  # serve alone, not its children's sessions
        serve.wait()
        deadline = time.monotonic() + 20
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in children if alive(pid)], "orphans left running"
    finally:
        for pid in [serve.pid, *children]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
