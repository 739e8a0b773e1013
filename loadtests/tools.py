"""The external load tools, ``wrk`` and ``redis-benchmark`` (Debian packages): finding them,
their command lines, and parsers of their output.

>>> parse_redis_benchmark(REDIS_BENCHMARK_SAMPLE)
{'HSET k f v': 276243.09}
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

WRK_SCRIPT = Path(__file__).resolve().parent / "wrk" / "post_bodies.lua"
WRK_MARK = "WRK_SUMMARY "

#: ``redis-benchmark --csv`` output (redis-tools 7.0), as a doctest and unit-test fixture.
REDIS_BENCHMARK_SAMPLE = (
    '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
    '"p99_latency_ms","max_latency_ms"\n'
    '"HSET k f v","276243.09","2.791","0.208","2.375","6.143","12.487","12.735"\n'
)

#: The Debian package each tool comes from.
PACKAGES = {"wrk": "wrk", "redis-benchmark": "redis-tools", "redis-server": "redis-server"}


class MissingToolError(RuntimeError):
    """A load tool is not installed; the message says how to install it."""


def require(tool: str) -> str:
    """The path of ``tool``, or :class:`MissingToolError` naming the package to install."""
    found = shutil.which(tool)
    if found:
        return found
    package = PACKAGES.get(tool, tool)
    raise MissingToolError(
        f"{tool} is not installed; on Debian/Ubuntu: "
        f"`sudo apt-get update && sudo apt-get install -y {package}`"
    )


@dataclass(frozen=True)
class WrkResult:
    """What one wrk run measured; latencies in milliseconds."""

    requests: int
    seconds: float
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float

    @property
    def requests_per_second(self) -> float:
        return self.requests / self.seconds


def wrk_command(
    url: str, bodies: Path, connections: int, duration_s: float, threads: int = 1
) -> list[str]:
    """A closed-loop wrk run: ``connections`` keep-alive connections, each one request at a
    time, POSTing the bodies in ``bodies`` (one JSON document per line) for ``duration_s``."""
    return [
        require("wrk"),
        f"--threads={threads}",
        f"--connections={connections}",
        f"--duration={max(1, round(duration_s))}s",
        "--timeout=10s",
        f"--script={WRK_SCRIPT}",
        url,
        "--",
        str(bodies),
    ]


def parse_wrk(output: str) -> WrkResult:
    """The summary line that ``wrk/post_bodies.lua`` prints at the end of a run."""
    for line in output.splitlines():
        if line.startswith(WRK_MARK):
            raw = json.loads(line[len(WRK_MARK) :])
            break
    else:
        raise ValueError(f"no {WRK_MARK.strip()} line in wrk output:\n{output[-2000:]}")
    error_fields = ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts")
    return WrkResult(
        requests=int(raw["requests"]),
        seconds=raw["duration_us"] / 1e6,
        errors=sum(int(raw[name]) for name in error_fields),
        p50_ms=raw["latency_p50_us"] / 1e3,
        p90_ms=raw["latency_p90_us"] / 1e3,
        p99_ms=raw["latency_p99_us"] / 1e3,
        mean_ms=raw["latency_mean_us"] / 1e3,
        max_ms=raw["latency_max_us"] / 1e3,
    )


def redis_benchmark_command(
    port: int, command: list[str], requests: int, pipeline: int = 16, clients: int = 50
) -> list[str]:
    """One custom command benchmarked with pipelining; ``__rand_int__`` spans 4096 values."""
    return [
        require("redis-benchmark"),
        "-h", "127.0.0.1",
        "-p", str(port),
        "-n", str(requests),
        "-c", str(clients),
        "-P", str(pipeline),
        "-r", "4096",
        "--csv",
        *command,
    ]  # fmt: skip


def parse_redis_benchmark(output: str) -> dict[str, float]:
    """Requests per second by test name, from ``redis-benchmark --csv`` output."""
    rows = [row for row in csv.reader(io.StringIO(output)) if row]
    if not rows or rows[0][:2] != ["test", "rps"]:
        raise ValueError(f"not redis-benchmark --csv output:\n{output[-2000:]}")
    found = {row[0]: float(row[1]) for row in rows[1:] if row[0] != "test"}
    if not found:
        raise ValueError("redis-benchmark printed no result line")
    return found
