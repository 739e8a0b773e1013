"""The two servers of :mod:`loadtests.bench.vw_daemon`, each started fresh for one run and driven
over one raw TCP connection (``TCP_NODELAY``, ``recv`` of 64 KiB, the same client for both):

- :class:`VWDaemon`: ``vw --daemon --foreground --num_children 1 --passes 1`` (its exact mode:
  one child learns; more would share the weights without locks) with FTRL at our defaults;
- :class:`Service`: ``online-ctr serve`` at the defaults of ``make run`` (an embedded Redis
  with its append-only file, the API, one worker, a generated API key), in a fresh data
  directory on free ports;
- :class:`BareEndpoint`: the bare FastAPI app of :mod:`loadtests.common.bare_app` (the same
  request model parsed, a constant answered, the API's uvicorn settings), started beside each
  :class:`Service`, so that a single prediction is also timed against the framework's floor.

Each has ``cpu()``: the CPU seconds so far of each of its processes, by name, from
``/proc/PID/stat``, each with the processes it forked (:func:`tree_cpu_seconds`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import redis

from loadtests.bench import _vw, bench_replay
from loadtests.bench.vw_daemon_parts import Answers, tree_ticks
from loadtests.common import feed
from loadtests.common.processes import http_ok, wait_until
from loadtests.common.stats import CLOCK_TICKS, cpu_seconds
from online_ctr.cli.local import API_KEYS_FILE, REDIS_PASSWORD_FILE
from online_ctr.learning.rules.ftrl import FTRLParams
from testkit.paths import ROOT
from testkit.ports import free_port

#: VW's bits: its daemon refuses ``--sparse_weights`` ("not supported"), and dense FTRL weights
#: at 24 bits already take 256 MiB; VW hashes our feature names into 2**24 slots.
BITS = _vw.INDEX_BITS
#: Seconds any one answer may take before the run fails.
TIMEOUT_S = 120.0


def connect(port: int) -> socket.socket:
    """A client connection to ``127.0.0.1:port``, small writes sent at once."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


def descendants(pid: int) -> list[int]:
    """``pid`` and every running process below it (``/proc/PID/task/TID/children``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children(current)
    return found


def children(pid: int) -> list[int]:
    """The processes ``pid`` started that are running."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` and of every process below it, running or waited for."""
    ticks = 0
    for member in descendants(pid):
        with contextlib.suppress(OSError):  # a fork that ended meanwhile: in its parent's
            ticks += tree_ticks(Path(f"/proc/{member}/stat").read_text())
    return ticks / CLOCK_TICKS


def command_line(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def stop(process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class VWDaemon:
    """Vowpal Wabbit's daemon, exact mode, FTRL with ``params``, on one connection."""

    def __init__(self, folder: Path, params: FTRLParams) -> None:
        self.port_file = folder / "vw.port"
        self.log = folder / "vw.log"
        self.params = params

    def command(self) -> list[str]:
        p = self.params
        return [
            *bench_replay.vw_command(),
            "--daemon", "--foreground", "--port", "0", "--port_file", str(self.port_file),
            "--num_children", "1", "--passes", "1",
            *_vw.ftrl_arguments(p.alpha, p.beta, p.l1, p.l2, bits=BITS),
        ]  # fmt: skip

    def __enter__(self) -> VWDaemon:
        self.port_file.unlink(missing_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._port_written, 60, "VW's daemon to write its port file")
        # The child that learns is forked after the port is written: its CPU counts too.
        wait_until(lambda: len(descendants(self.process.pid)) > 1, 60, "VW's daemon's child")
        self.connection = connect(int(self.port_file.read_text()))
        self.answers = Answers(self.connection)
        return self

    def _port_written(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"VW's daemon exited: {self.log.read_text()[-2000:]}")
        return self.port_file.exists() and self.port_file.read_text().strip() != ""

    def __exit__(self, *exc: object) -> None:
        self.connection.close()
        stop(self.process)

    def cpu(self) -> dict[str, float]:
        """The daemon's CPU seconds so far, with its child's (the one that learns)."""
        return {"VW daemon": tree_cpu_seconds(self.process.pid)}

    def learn(self, payload: bytes, count: int) -> tuple[float, bytes]:
        """Send every line at once (a thread writes while this one reads) and read every
        answer: the seconds that took, and the answers (each the score before learning)."""
        sender = threading.Thread(target=self.connection.sendall, args=(payload,))
        started = time.perf_counter()
        sender.start()
        answers = self.answers.lines(count)
        seconds = time.perf_counter() - started
        sender.join()
        return seconds, answers

    def predict(self, lines: bytes, count: int) -> None:
        """Send ``count`` lines to predict, and read their answers."""
        self.connection.sendall(lines)
        self.answers.lines(count)


class BareEndpoint:
    """The bare app's ``POST /predict`` (:mod:`loadtests.common.bare_app`) at its defaults, on
    a free port, over one connection opened at the first request after :meth:`disconnect`.
    ``module``: another app served the same way (:mod:`loadtests.common.round_trip_app`), with
    ``env`` added to its environment."""

    def __init__(
        self,
        folder: Path,
        module: str = "loadtests.common.bare_app",
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = folder / f"{module.rsplit('.', 1)[-1]}.log"
        self.port = free_port()
        self.module = module
        self.extra_env = env or {}

    def __enter__(self) -> BareEndpoint:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
        env["OCTR_PORT"] = str(self.port)
        env.update(self.extra_env)
        argv = [sys.executable, "-m", self.module]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        wait_until(self._ready, 60, f"the bare app ready on port {self.port}")
        self.connection: socket.socket | None = None
        return self

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"the bare app exited: {self.log.read_text()[-3000:]}")
        return http_ok(f"http://127.0.0.1:{self.port}/docs")

    def __exit__(self, *exc: object) -> None:
        self.disconnect()
        stop(self.process)

    def disconnect(self) -> None:
        """Close the connection: the next request opens another (one left idle longer than
        uvicorn's keep-alive, 5 s, would be closed by the server)."""
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def exchange(self, request: bytes) -> bytes:
        """Send one HTTP request and read its answer, which must be a 200."""
        if self.connection is None:
            self.connection = connect(self.port)
            self.answers = Answers(self.connection)
        self.connection.sendall(request)
        status, body = self.answers.response()
        if status != 200:
            raise RuntimeError(f"the bare app answered {status}: {body[:500]!r}")
        return body


class Service:
    """``online-ctr serve`` as ``make run`` starts it, in ``folder``, on free ports; ``root``:
    the checkout whose code runs (its folder first on ``PYTHONPATH``)."""

    def __init__(self, folder: Path, root: Path = ROOT) -> None:
        self.root = root
        self.data_dir = folder / "serve"
        self.log = folder / "serve.log"
        self.port = free_port()
        self.redis_port = free_port()

    def env(self) -> dict[str, str]:
        """This process's environment without any ``OCTR_`` setting (the defaults hold), and
        the data directory and ports of this run."""
        kept = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
        kept.pop("REDIS_URL", None)
        if self.root != ROOT:
            kept["PYTHONPATH"] = str(self.root)
        return {
            **kept,
            "OCTR_DATA_DIR": str(self.data_dir),
            "OCTR_PORT": str(self.port),
            "OCTR_EMBEDDED_REDIS_PORT": str(self.redis_port),
            "OCTR_WORKER_METRICS_PORT": str(free_port()),
        }

    def __enter__(self) -> Service:
        argv = [sys.executable, "-m", "online_ctr.cli.main", "serve"]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                argv, cwd=self.root, env=self.env(), stdout=log, stderr=subprocess.STDOUT
            )
        wait_until(self._ready, 120, f"online-ctr serve ready on port {self.port}")
        self.key = (self.data_dir / API_KEYS_FILE).read_text().split()[0]
        password = (self.data_dir / REDIS_PASSWORD_FILE).read_text().strip()
        self.redis = redis.Redis(port=self.redis_port, password=password, socket_timeout=30)
        self.connection = connect(self.port)
        self.answers = Answers(self.connection)
        self.processes = self._processes()
        return self

    def reconnect(self) -> None:
        """A new connection for the next requests (one left idle longer than the API's idle
        timeout is closed by the server)."""
        self.connection.close()
        self.connection = connect(self.port)
        self.answers = Answers(self.connection)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"online-ctr serve exited: {self.log.read_text()[-3000:]}")
        return http_ok(f"http://127.0.0.1:{self.port}/readyz")

    def __exit__(self, *exc: object) -> None:
        self.connection.close()
        self.redis.close()
        stop(self.process)

    def _processes(self) -> dict[str, int]:
        """Redis, the API and the worker: the processes ``serve`` started, by name."""
        named = {}
        for pid in children(self.process.pid):
            line = command_line(pid)
            name = "Redis" if "redis-server" in line else line.split()[-1]
            named[{"api": "API"}.get(name, name)] = pid
        if set(named) != {"Redis", "API", "worker"}:
            raise RuntimeError(f"serve's processes are not Redis, the API and one worker: {named}")
        return named

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of Redis (its forks included), the API, the worker, and
        ``serve`` itself (it only waits for them)."""
        return {
            "serve": cpu_seconds(self.process.pid),
            **{name: tree_cpu_seconds(pid) for name, pid in self.processes.items()},
        }

    def exchange(self, request: bytes, expected: int) -> bytes:
        """Send one HTTP request and read its answer, which must have status ``expected``."""
        self.connection.sendall(request)
        status, body = self.answers.response()
        if status != expected:
            raise RuntimeError(f"the API answered {status}: {body[:500]!r}")
        return body

    def learn(self, requests: list[bytes], count: int) -> tuple[float, float]:
        """Post every ``/learn`` request, one at a time on the one connection, then wait until
        the model's step covers them all: the seconds from the first request to that, and to
        the last answer."""
        started = time.perf_counter()
        for request in requests:
            self.exchange(request, 202)
        answered = time.perf_counter() - started
        ended, _ = feed.wait_for_step(self.redis, count, TIMEOUT_S, self._check)
        return ended - started, answered

    def _check(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"online-ctr serve exited: {self.log.read_text()[-3000:]}")

    def logloss(self) -> float | None:
        return feed.progressive_logloss(self.redis)

    def status(self) -> dict[str, object]:
        """``GET /models/default``: what the API says it learned."""
        answer = httpx.get(
            f"http://127.0.0.1:{self.port}/models/default",
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=10,
        )
        answer.raise_for_status()
        result: dict[str, object] = answer.json()
        return result
