"""What the benchmarks run against: a Redis server, the real ``online-ctr api`` and
``online-ctr worker`` processes, and the bare app, each a child process logging to a file.

>>> with Stack(Path(tempfile.mkdtemp())) as stack:  # doctest: +SKIP
...     api_url = stack.start_api()
...     stack.start_workers(2, OCTR_BATCH_SIZE="4096")
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import redis

from loadtests.common import tools
from online_ctr.cli.embedded import RedisServer
from testkit.paths import ROOT
from testkit.ports import free_port


def wait_until(check: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Poll ``check`` every 5 ms until it is true; ``RuntimeError`` naming ``what`` if never."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, redis.RedisError):
            if check():
                return
        time.sleep(0.005)
    raise RuntimeError(f"timed out after {timeout_s:g}s waiting for {what}")


def http_ok(url: str) -> bool:
    return httpx.get(url, timeout=1.0).status_code == 200


class Stack:
    """Redis plus any API, worker and bare-app processes; everything stops on exit."""

    def __init__(self, work_dir: Path, **settings: str) -> None:
        tools.require("redis-server")
        self.work_dir = work_dir
        self.redis_server = RedisServer(work_dir / "redis", persist=False)
        self.settings = settings
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.worker_metrics: dict[str, str] = {}

    def __enter__(self) -> Stack:
        self.redis_server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(*self.children)
        self.redis_server.stop()

    @property
    def redis_pid(self) -> int:
        with self.client() as client:
            return int(client.info("server")["process_id"])

    def client(self) -> redis.Redis:
        """A synchronous client of the stack's Redis."""
        return redis.Redis.from_url(self.redis_server.url, socket_timeout=30)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of the service's processes."""
        return {
            **os.environ,
            "OCTR_REDIS_URL": self.redis_server.url,
            "OCTR_HEARTBEAT_INTERVAL_S": "0.5",
            # The load generators send no API key; the key check is one digest and one dict
            # look-up per request, well inside the noise of these measurements.
            "OCTR_AUTH": "off",
            # The freshness probe's marker is a large raw number, learned past L1 in one
            # example; the Criteo rows the benchmarks send hold no numbers at all.
            "OCTR_NUMERIC": "raw",
            **self.settings,
            **extra,
        }

    def spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        with (self.work_dir / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                argv, cwd=ROOT, env=self.env(**env), stdout=log, stderr=subprocess.STDOUT
            )
        self.children[name] = process
        return process

    def start_api(self, **env: str) -> str:
        """The real ``online-ctr api``; returns its URL once ``/healthz`` answers."""
        port = free_port()
        argv = [sys.executable, "-m", "online_ctr.cli.main", "api"]
        self.spawn("api", argv, OCTR_PORT=str(port), **env)
        url = f"http://127.0.0.1:{port}"
        self._wait_http("api", f"{url}/healthz")
        return url

    def start_bare(self) -> str:
        """The bare app of :mod:`loadtests.common.bare_app`, served like the API."""
        port = free_port()
        self.spawn("bare", [sys.executable, "-m", "loadtests.common.bare_app"], OCTR_PORT=str(port))
        url = f"http://127.0.0.1:{port}"
        self._wait_http("bare", f"{url}/docs")
        return url

    def start_workers(self, count: int, **env: str) -> list[subprocess.Popen[bytes]]:
        """``count`` real ``online-ctr worker`` processes, each with its metrics port."""
        started = []
        for index in range(count):
            name = f"worker{index}"
            port = free_port()
            self.worker_metrics[name] = f"http://127.0.0.1:{port}/metrics"
            argv = [sys.executable, "-m", "online_ctr.cli.main", "worker"]
            env_of_worker = {"OCTR_WORKER_METRICS_PORT": str(port), "OCTR_WORKER_NAME": name}
            started.append(self.spawn(name, argv, **env_of_worker, **env))
        return started

    def workers(self) -> list[str]:
        return [name for name in self.children if name.startswith("worker")]

    def stop(self, *names: str) -> None:
        """SIGTERM the named children (a worker finishes its batch), then wait for them."""
        for name in names:
            if self.children[name].poll() is None:
                self.children[name].terminate()
        for name in names:
            process = self.children.pop(name)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            self.worker_metrics.pop(name, None)

    def check_alive(self) -> None:
        """``RuntimeError`` with the logs if a child has exited."""
        for name, process in self.children.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode}):\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.work_dir.glob("*.log"))
        )

    def _wait_http(self, name: str, url: str) -> None:
        def up() -> bool:
            self.check_alive()
            return http_ok(url)

        wait_until(up, 60, f"{name} at {url}")


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for a benchmark's Redis files, logs and bodies."""
    return tempfile.TemporaryDirectory(prefix=f"octr-{prefix}-")
