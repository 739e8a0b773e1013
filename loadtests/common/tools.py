"""The external load tool, ``wrk`` (a Debian package), and the servers the benchmarks start:
finding them, wrk's command line, and the parser of its output."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

WRK_SCRIPT = Path(__file__).resolve().parent / "wrk" / "post_bodies.lua"
WRK_MARK = "WRK_SUMMARY "

#: The Debian package each tool comes from.
PACKAGES = {"wrk": "wrk", "redis-server": "redis-server"}


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
