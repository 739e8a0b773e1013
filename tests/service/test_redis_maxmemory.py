"""The embedded Redis's memory limit: ``OCTR_REDIS_MAXMEMORY`` read in Redis's units (a bad
value is one line naming it), a default share of the machine's memory (its cgroup limit if
lower), and the limit on the redis-server that ``online-ctr serve`` starts, with
``noeviction``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis

from online_ctr.cli.embedded import RedisServer
from online_ctr.cli.local import load_record, redis_password
from online_ctr.cli.memory import (
    DEFAULT_SHARE,
    cgroup_limit,
    default_maxmemory,
    embedded_maxmemory,
    machine_memory,
    memory_limit_text,
    physical_memory,
)
from online_ctr.config.settings import Settings
from testkit.ports import free_port
from tests.service.test_commands import assert_one_line, run
from tests.service.test_serve import start_serve, wait_ready

MIB, GIB = 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("given", "size"),
    [
        ("512mb", 512 * MIB),
        ("4GB", 4 * GIB),
        ("2g", 2_000_000_000),
        ("1500k", 1_500_000),
        ("2048kb", 2 * MIB),
        ("1048576", MIB),
        (" 64 mb ", 64 * MIB),
        ("0", 0),
    ],
)
def test_a_limit_is_read_in_redis_units(given: str, size: int) -> None:
    settings = Settings(redis_maxmemory=given)
    assert settings.redis_maxmemory_bytes() == size
    assert embedded_maxmemory(settings) == size


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("512", "'512' is 512 bytes, less than an empty Redis holds; give a unit (e.g. 512mb)"),
        ("1.5gb", "'1.5gb' is not a memory size; write bytes or a whole number with a Redis unit"),
        ("4GiB", "'4GiB' is not a memory size"),
        ("lots", "'lots' is not a memory size"),
    ],
)
def test_a_bad_limit_is_one_line_naming_the_variable(given: str, said: str, tmp_path: Path) -> None:
    result = run("serve", tmp_path, OCTR_REDIS_MAXMEMORY=given)
    assert_one_line(result, f"OCTR_REDIS_MAXMEMORY: {said}")


def test_unset_the_limit_is_a_share_of_the_machines_memory() -> None:
    assert Settings().redis_maxmemory_bytes() is None
    assert embedded_maxmemory(Settings()) == default_maxmemory() > 0
    assert default_maxmemory(24 * GIB) == 9830 * MIB  # 40%, in whole MiB
    assert default_maxmemory(4 * GIB) == int(DEFAULT_SHARE * 4 * GIB) // MIB * MIB
    assert 0 < machine_memory() <= physical_memory()
    assert default_maxmemory() == default_maxmemory(machine_memory())


def test_a_cgroup_limit_below_the_ram_is_the_machines_memory(tmp_path: Path) -> None:
    """Version 2 (memory.max) and version 1 (memory.limit_in_bytes), set on the process's own
    cgroup or an ancestor of it; "max" and version 1's near-2^63 mean none."""
    v2 = tmp_path / "v2"
    (v2 / "app" / "worker").mkdir(parents=True)
    (v2 / "memory.max").write_text("max\n")
    (v2 / "app" / "memory.max").write_text(f"{2 * GIB}\n")
    (v2 / "app" / "worker" / "memory.max").write_text("max\n")
    assert cgroup_limit(v2, "0::/app/worker\n") == 2 * GIB

    v1 = tmp_path / "v1"
    (v1 / "memory" / "docker" / "abc").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory" / "docker" / "abc" / "memory.limit_in_bytes").write_text(f"{GIB}\n")
    membership = "4:memory:/docker/abc\n1:cpu:/docker/abc\n0::/\n"
    assert cgroup_limit(v1, membership) == GIB
    assert cgroup_limit(tmp_path / "none", membership) is None


def test_the_embedded_redis_takes_its_limit_without_eviction(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", port=free_port(), persist=False, maxmemory=96 * MIB) as server:
        client = redis.Redis.from_url(server.url)
        assert client.config_get("maxmemory") == {"maxmemory": str(96 * MIB)}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        client.close()


def test_serve_starts_its_redis_with_the_default_limit(tmp_path: Path) -> None:
    port = free_port()
    serve = start_serve(tmp_path, port)
    try:
        wait_ready(f"http://127.0.0.1:{port}", serve)
        data = tmp_path / "data"
        record = load_record(data)
        assert record is not None
        url = str(record["redis_url"]).replace("//", f"//:{redis_password(data)}@", 1)
        client = redis.Redis.from_url(url)
        assert client.config_get("maxmemory") == {"maxmemory": str(default_maxmemory())}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        client.close()
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(30) == 0
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
    log = (tmp_path / "serve.log").read_text()
    assert f"memory limit {memory_limit_text(default_maxmemory())} (OCTR_REDIS_MAXMEMORY)" in log, (
        log
    )
