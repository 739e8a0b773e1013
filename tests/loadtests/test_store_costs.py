"""The store-costs command runs for real on tiny sizes and prints every figure (no timings
are asserted)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loadtests.costs import store_costs
from online_ctr.cli.embedded import RedisServer
from testkit.ports import free_port


def test_store_costs_prints_each_size_and_batch_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with RedisServer(tmp_path / "redis", port=free_port(), persist=False) as server:
        asyncio.run(store_costs.per_feature(server.url, (0, 5_000), server.pid))
        asyncio.run(store_costs.drain(server.url, 2_000, (500, 4_096)))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "model of          0 features",
        "model of      5,000 features",
        "drain at batch_size    500",
        "drain at batch_size  4,096",
    ]
    assert all("us/feature" in line and "us CPU/feature" in line for line in lines[:2])
    assert all("us/HSET" in line for line in lines[:2])
    assert all("ex/s" in line and "HSETs/example" in line for line in lines[2:])
