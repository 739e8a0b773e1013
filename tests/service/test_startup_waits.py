"""The real ``online-ctr api``, ``worker`` and ``serve`` start alike on a Redis that is not up
yet or restarting: they wait for it (``OCTR_REDIS_WAIT_S``), saying so in the log, and come up
when it answers; a Redis away for longer, or a model stored with other settings, is one line
on stderr and a non-zero exit status, never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec, redis_client
from testkit.ports import free_port
from tests.integration.conftest import Service, wait_until
from tests.service.test_commands import assert_one_line, run

EXAMPLES = [
    {"features": {"site": f"s{n % 3}", "hour": float(n % 24)}, "label": n % 2} for n in range(20)
]


class DroppingProxy:
    """A TCP proxy to a real Redis that closes the connections numbered in ``drop`` (from 1)
    as soon as they are made, as a Redis restarting under them would: between a process's
    first connection and its next startup steps, without any timing luck."""

    def __init__(self, port: int, drop: range) -> None:
        self.target = port
        self.drop = drop
        self.dropped = 0
        self.sockets: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        for number in itertools.count(1):
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            self.sockets.append(client)
            if number in self.drop:
                self.dropped += 1
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets.append(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        for end in self.sockets:
            end.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until either side ends, then end both (the other direction's copy ends too)."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """An API and a worker not started yet (``service.start``); stopped after the test."""
    api_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    env.update(
        OCTR_PORT=str(api_port),
        OCTR_AUTH="off",
        OCTR_HEARTBEAT_INTERVAL_S="0.2",
        OCTR_REDIS_TIMEOUT_S="0.5",
        OCTR_REDIS_WAIT_S="60",
        OCTR_BATCH_SIZE="8",
        OCTR_STATE_BUCKETS="1024",
        OCTR_WORKER_METRICS_PORT="0",
    )
    running = Service(f"http://127.0.0.1:{api_port}", [], env, tmp_path)
    yield running
    running.stop()


def log(service: Service, name: str) -> str:
    return (service.log_dir / f"{name}.log").read_text(errors="replace")


def learn_and_wait(service: Service) -> None:
    """Ready, then the worker learns what the API accepts: both are up and talk to Redis."""
    wait_until(
        lambda: httpx.get(f"{service.api_url}/readyz").status_code == 200,
        what=f"the service to be ready\n{service.logs()}",
    )
    reply = httpx.post(f"{service.api_url}/learn", json={"examples": EXAMPLES}, timeout=5)
    assert reply.status_code == 202, reply.text

    def step() -> Any:
        return httpx.get(f"{service.api_url}/models/default", timeout=5).json()["global_step"]

    wait_until(lambda: step() == len(EXAMPLES), what=f"the worker to learn\n{service.logs()}")
    assert "Traceback" not in service.logs()


def test_the_api_and_a_worker_wait_for_a_redis_that_comes_up_late(
    service: Service, tmp_path: Path
) -> None:
    server = RedisServer(
        tmp_path / "redis", port=free_port(), persist=False
    )  # its port, not started yet
    service.env["OCTR_REDIS_URL"] = server.url
    service.start("api", "api")
    service.start("worker", "worker")
    try:
        wait_until(
            lambda: all("waiting for Redis" in log(service, n) for n in ("api", "worker")),
            what=f"both to say they wait\n{service.logs()}",
        )
        assert all(process.poll() is None for process in service.processes.values())
        server.start()
        learn_and_wait(service)
        assert all("Redis answered after" in log(service, n) for n in ("api", "worker"))
    finally:
        service.stop()
        server.stop()


def test_connections_dropped_during_the_startup_steps_are_waited_out(
    service: Service, tmp_path: Path
) -> None:
    """The chaos case: Redis answers a process's first connection, then restarts under its
    next steps (the cluster check, the model's creation, the registry)."""
    with RedisServer(tmp_path / "redis", port=free_port(), persist=False) as server:
        proxies = [DroppingProxy(server.port, range(2, 5)) for _ in range(2)]
        try:
            service.start("api", "api", OCTR_REDIS_URL=proxies[0].url)
            service.start("worker", "worker", OCTR_REDIS_URL=proxies[1].url)
            learn_and_wait(service)
            assert [proxy.dropped for proxy in proxies] == [3, 3]
        finally:
            service.stop()
            for proxy in proxies:
                proxy.close()


@pytest.mark.parametrize("command", ["api", "worker", "serve"])
def test_a_redis_away_for_longer_than_the_wait_is_one_line(command: str, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = run(command, tmp_path, OCTR_REDIS_URL=url, OCTR_REDIS_WAIT_S="1")
    assert_one_line(result, "did not answer within 1s", "OCTR_REDIS_URL", "OCTR_REDIS_WAIT_S")


@pytest.mark.parametrize("command", ["api", "serve"])
def test_a_model_stored_with_other_settings_is_one_line(
    command: str, tmp_path: Path, redis_url: str
) -> None:
    settings = Settings(redis_url=redis_url, state_buckets=1024, alpha=0.1)

    async def create() -> None:
        client = redis_client(settings)
        await ModelStore(client, model_spec(settings)).ensure()
        await client.aclose()

    asyncio.run(create())
    result = run(
        command,
        tmp_path,
        OCTR_REDIS_URL=redis_url,
        OCTR_STATE_BUCKETS="1024",
        OCTR_ALPHA="0.2",
        OCTR_LOG_LEVEL="warning",
    )
    assert_one_line(result, "OCTR_ALPHA=0.2 (stored: 0.1)", "online-ctr models delete default")
