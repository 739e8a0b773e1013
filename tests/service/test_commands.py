"""The real ``online-ctr serve|api|worker`` commands: every startup failure is one line on
stderr and a non-zero exit status naming the setting or port."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec, redis_client
from testkit.ports import free_port

pytestmark = pytest.mark.processes


#: This checkout, first on the children's path (the virtualenv may hold another checkout).
ROOT = Path(__file__).resolve().parents[2]


def run(command: str, tmp_path: Path, timeout_s: float = 30, **env: str) -> tuple[int, str]:
    """Run ``online-ctr <command>`` to its end; its status and stderr."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    # Free ports unless the test says otherwise: the defaults may be taken on this machine.
    defaults = {
        "OCTR_PORT": str(free_port()),
        "OCTR_WORKER_METRICS_PORT": str(free_port()),
        "OCTR_EMBEDDED_REDIS_PORT": str(free_port()),
    }
    environment.update(PYTHONPATH=str(ROOT), OCTR_DATA_DIR=str(tmp_path / "data"), OCTR_AUTH="off")
    environment.update({**defaults, **env})
    done = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", command],
        env=environment,
        capture_output=True,
        timeout=timeout_s,
        cwd=tmp_path,
    )
    return done.returncode, done.stderr.decode()


def assert_one_line(result: tuple[int, str], *parts: str) -> None:
    status, stderr = result
    assert status != 0, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("online-ctr: ") and "Traceback" not in stderr
    for part in parts:
        assert part in stderr, stderr


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.parametrize("command", ["serve", "api"])
def test_the_api_port_in_use(command: str, busy_port: int, tmp_path: Path, redis_url: str) -> None:
    url = {"OCTR_REDIS_URL": redis_url} if command == "api" else {}
    result = run(command, tmp_path, OCTR_PORT=str(busy_port), **url)
    assert_one_line(
        result,
        f"port {busy_port} on 127.0.0.1 (OCTR_PORT) is already in use",
        "set OCTR_PORT (or --port) to a free port",
    )


def test_the_worker_metrics_port_in_use(busy_port: int, tmp_path: Path) -> None:
    result = run("serve", tmp_path, OCTR_WORKER_METRICS_PORT=str(busy_port))
    assert_one_line(result, f"port {busy_port}", "(OCTR_WORKER_METRICS_PORT) is already in use")


@pytest.mark.parametrize("command", ["serve", "api", "worker"])
def test_a_malformed_redis_url(command: str, tmp_path: Path) -> None:
    result = run(command, tmp_path, REDIS_URL="localhost:6379")
    assert_one_line(result, "OCTR_REDIS_URL: 'localhost:6379' is not a Redis URL", "redis://")


@pytest.mark.parametrize("command", ["serve", "api", "worker"])
def test_invalid_settings_name_the_variable(command: str, tmp_path: Path) -> None:
    assert_one_line(run(command, tmp_path, OCTR_ALPHA="-1"), "OCTR_ALPHA must be > 0")
    assert_one_line(run(command, tmp_path, OCTR_BATCH_SIZE="many"), "OCTR_BATCH_SIZE: ")
    linger = run(command, tmp_path, OCTR_BATCH_LINGER_MS="5000")
    assert_one_line(linger, "OCTR_BATCH_LINGER_MS", "1000")
    lease = run(command, tmp_path, OCTR_BATCH_LINGER_MS="400", OCTR_LEASE_TTL_MS="1000")
    assert_one_line(lease, "OCTR_BATCH_LINGER_MS=400", "a third of OCTR_LEASE_TTL_MS=1000")


def test_no_redis_server_on_path(tmp_path: Path) -> None:
    result = run("serve", tmp_path, PATH=str(tmp_path))
    assert_one_line(result, "no redis-server found on PATH", "OCTR_REDIS_URL")


def test_the_api_without_a_redis_url(tmp_path: Path) -> None:
    assert_one_line(run("api", tmp_path), "the API needs a Redis: set OCTR_REDIS_URL")


def test_api_keys_required_unless_auth_is_off(tmp_path: Path, redis_url: str) -> None:
    result = run("api", tmp_path, OCTR_REDIS_URL=redis_url, OCTR_AUTH="on")
    assert_one_line(result, "no API keys are configured", "OCTR_AUTH=off")


def test_an_unreachable_redis_after_a_bounded_wait(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = run("serve", tmp_path, OCTR_REDIS_URL=url, OCTR_REDIS_WAIT_S="1")
    assert_one_line(result, "did not answer within 1s", "OCTR_REDIS_URL")


def test_the_worker_alone_fails_clearly(busy_port: int, tmp_path: Path, redis_url: str) -> None:
    result = run(
        "worker", tmp_path, OCTR_REDIS_URL=redis_url, OCTR_WORKER_METRICS_PORT=str(busy_port)
    )
    assert_one_line(result, f"port {busy_port}", "OCTR_WORKER_METRICS_PORT")
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert_one_line(run("worker", tmp_path, OCTR_REDIS_URL=url, OCTR_REDIS_WAIT_S="1"), "1s")


def test_a_worker_for_a_model_created_otherwise_names_what_differs(
    tmp_path: Path, redis_url: str
) -> None:
    redis.Redis.from_url(redis_url).flushall()
    settings = Settings(redis_url=redis_url, state_buckets=1024)

    async def create() -> None:
        client = redis_client(settings)
        await ModelStore(client, model_spec(settings)).ensure()
        await client.aclose()

    asyncio.run(create())
    result = run(
        "worker",
        tmp_path,
        OCTR_REDIS_URL=redis_url,
        OCTR_WORKER_METRICS_PORT="0",
        OCTR_STATE_BUCKETS="1024",
        OCTR_ALPHA="0.5",
    )
    assert_one_line(result, "OCTR_ALPHA=0.5 (stored: 0.1)", "online-ctr models delete default")


def test_the_worker_without_a_redis_url(tmp_path: Path) -> None:
    result = run("worker", tmp_path, OCTR_WORKER_METRICS_PORT="0")
    assert_one_line(result, "no Redis URL: set OCTR_REDIS_URL")


def test_a_server_keeps_its_password_out_of_its_command_line(tmp_path: Path) -> None:
    with RedisServer(
        tmp_path / "r", port=free_port(), persist=False, password="secret-0123"
    ) as server:
        assert "secret-0123" not in " ".join(server.command())
        assert (tmp_path / "r" / "redis.conf").stat().st_mode & 0o777 == 0o600


def test_models_delete_removes_a_model_and_asks_first(tmp_path: Path, redis_url: str) -> None:
    plain = redis.Redis.from_url(redis_url)
    plain.flushall()
    plain.hset("octr:{gone}:meta", "t", 5)
    plain.hset("octr:{gone/3}:b:7", "x", "y")
    plain.hset("octr:{kept}:meta", "t", 1)

    def models(*args: str) -> subprocess.CompletedProcess[str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
        environment.update(PYTHONPATH=str(ROOT), OCTR_REDIS_URL=redis_url)
        command = [sys.executable, "-m", "online_ctr.cli.main", "models", "delete", *args]
        return subprocess.run(
            command,
            env=environment,
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )

    unconfirmed = models("gone")
    assert unconfirmed.returncode == 1 and "nothing deleted" in unconfirmed.stdout
    assert plain.exists("octr:{gone}:meta")
    done = models("gone", "--yes")
    assert done.returncode == 0, done.stderr
    assert "deleted model 'gone': 2 keys" in done.stdout
    assert plain.keys("octr:{gone*") == [] and plain.exists("octr:{kept}:meta")
    invalid = models("no/such", "--yes")
    assert invalid.returncode == 1 and "invalid model name" in invalid.stderr
    plain.close()
