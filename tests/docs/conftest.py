"""A real ``online-ctr serve``, started as ``make run`` starts it, in a fresh directory of its
own: the data directory ``.online-ctr`` is new, and ``.venv`` and ``examples`` are links to
the project's, so the documentation's relative paths resolve as they do in a clone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from testkit.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
#: The ports the documentation shows: the API, the worker's /metrics and the embedded Redis.
DOC_PORTS = {"api": 8000, "worker": 9101, "redis": 6380}


@dataclass
class LocalServe:
    """A running ``serve``: its directory, its ports and the environment of a user's shell."""

    directory: Path
    ports: dict[str, int]
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    started: float
    ready_s: float = 0.0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    def log(self) -> str:
        return (self.directory / "serve.log").read_text(errors="replace")[-4000:]

    def on_these_ports(self, text: str) -> str:
        """``text`` of the documentation with its ports replaced by this serve's."""
        for name, port in DOC_PORTS.items():
            text = text.replace(f":{port}", f":{self.ports[name]}")
        return text


def build_site(site_dir: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the project's site into ``site_dir``."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def user_environment() -> dict[str, str]:
    """This process's environment without any online-ctr setting: a fresh shell's."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OCTR_", "REDIS_URL"))}


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops `make run`
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def start_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[], LocalServe]]:
    """Start ``online-ctr serve`` in a new directory; each is stopped after the test."""
    started: list[LocalServe] = []

    def start() -> LocalServe:
        directory = tmp_path_factory.mktemp("clone")
        for name in (".venv", "examples"):
            (directory / name).symlink_to(ROOT / name)
        ports = {name: free_port() for name in DOC_PORTS}
        env = user_environment()
        serve_env = {
            **env,
            "OCTR_PORT": str(ports["api"]),
            "OCTR_WORKER_METRICS_PORT": str(ports["worker"]),
            "OCTR_EMBEDDED_REDIS_PORT": str(ports["redis"]),
        }
        with (directory / "serve.log").open("wb") as log:
            process = subprocess.Popen(
                [str(ROOT / ".venv" / "bin" / "online-ctr"), "serve"],
                cwd=directory,
                env=serve_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        serve = LocalServe(directory, ports, env, process, time.monotonic())
        started.append(serve)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{serve.api_url}/readyz", timeout=2).status_code == 200:
                    serve.ready_s = time.monotonic() - serve.started
                    return serve
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"serve did not get ready within 120 s\n{serve.log()}")

    yield start
    for serve in started:
        _stop(serve.process)
