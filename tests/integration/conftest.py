"""Run the real ``online-ctr api`` and ``online-ctr worker`` processes against a test Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from testkit.ports import free_port


@dataclass
class Service:
    """A running API and its workers, with their logs."""

    api_url: str
    worker_metrics_urls: list[str]
    env: dict[str, str]
    log_dir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, command: str, **env: str) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.log").open("ab") as log:  # the child keeps its copy
            process = subprocess.Popen(
                [sys.executable, "-m", "online_ctr.cli.main", command],
                env={**self.env, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.processes[name] = process
        return process

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.log_dir.glob("*.log"))
        )

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


#: How long a started service may take to answer /readyz. A deadline, not a measure: the
#: first start of a fresh clone compiles the numba kernels into their cache (21 s for a
#: whole client test on an idle 2-core machine, measured with an empty NUMBA_CACHE_DIR), and
#: the suite's own processes share the cores, so 30 s was once too short.
READY_DEADLINE_S = 120.0


def wait_until(
    check: Callable[[], bool],
    timeout_s: float = 30.0,
    what: str = "",
    logs: Callable[[], str] | None = None,
) -> None:
    """Poll ``check`` until true; fail with ``what`` (and ``logs()`` as they are then) after
    the deadline (no fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    shown = f"\n{logs()}" if logs is not None else ""
    raise AssertionError(f"timed out waiting for {what} ({timeout_s:g} s){shown}")


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """Start the API and ``workers`` worker processes on ``redis_url`` (the workers on
    ``worker_redis_url`` if given: another Redis user); stopped after the test."""
    services: list[Service] = []

    def start(
        redis_url: str, workers: int = 1, worker_redis_url: str | None = None, **settings: str
    ) -> Service:
        api_port = free_port()
        metric_ports = [free_port() for _ in range(workers)]
        env = {
            **os.environ,
            "OCTR_REDIS_URL": redis_url,
            "OCTR_PORT": str(api_port),
            "OCTR_HEARTBEAT_INTERVAL_S": "0.2",
            "OCTR_REDIS_TIMEOUT_S": "0.5",
            "OCTR_AUTH": "off",  # API keys are tested in tests/service
            **settings,
        }
        service = Service(
            f"http://127.0.0.1:{api_port}",
            [f"http://127.0.0.1:{port}/metrics" for port in metric_ports],
            env,
            tmp_path,
        )
        services.append(service)
        service.start("api", "api")
        for index, port in enumerate(metric_ports):
            service.start(
                f"worker{index}",
                "worker",
                OCTR_WORKER_METRICS_PORT=str(port),
                OCTR_WORKER_NAME=f"worker{index}",
                OCTR_REDIS_URL=worker_redis_url or redis_url,
            )
        wait_until(
            lambda: httpx.get(f"{service.api_url}/readyz").status_code == 200,
            READY_DEADLINE_S,
            what="the service to be ready",
            logs=service.logs,
        )
        return service

    yield start
    for service in services:
        service.stop()
