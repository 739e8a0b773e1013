"""``/predict`` timed one request at a time: with ``wrk`` at one connection when it is
installed (its latency histogram, no client overhead to speak of), else with httpx.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

import httpx

from loadtests.bench.scale_client import JSON
from loadtests.common import tools
from loadtests.common.stats import percentile


@dataclass(frozen=True)
class Timing:
    """Sequential ``/predict`` requests: latency percentiles and requests per second."""

    p50_ms: float
    p99_ms: float
    requests_per_s: float


def timing_tool() -> str:
    """``wrk`` when installed (1 connection: sequential, closed loop), else ``httpx``."""
    return "wrk" if shutil.which("wrk") else "httpx"


def sequential(url: str, path: Path, duration_s: float) -> Timing:
    """Post the bodies of ``path`` one after another with httpx for ``duration_s``."""
    bodies = [line for line in path.read_bytes().splitlines() if line]
    latencies: list[float] = []
    with httpx.Client(timeout=60) as http:
        started = time.perf_counter()
        for body in cycle(bodies):
            sent = time.perf_counter()
            answer = http.post(url, content=body, headers=JSON)
            latencies.append(time.perf_counter() - sent)
            if answer.status_code != 200:
                raise RuntimeError(f"{url} answered {answer.status_code}: {answer.text[:500]}")
            if time.perf_counter() - started >= duration_s:
                break
        seconds = time.perf_counter() - started
    ms = [latency * 1e3 for latency in latencies]
    return Timing(percentile(ms, 50), percentile(ms, 99), len(ms) / seconds)


def with_wrk(url: str, path: Path, duration_s: float) -> Timing:
    """wrk, 1 thread and 1 connection, posting the bodies of ``path`` for ``duration_s``."""
    command = tools.wrk_command(url, path, connections=1, duration_s=duration_s)
    done = subprocess.run(command, capture_output=True, text=True, timeout=duration_s + 120)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr[-2000:]}")
    result = tools.parse_wrk(done.stdout)
    if result.errors:
        raise RuntimeError(f"{url}: {result.errors} failed requests; wrk said:\n{done.stdout}")
    return Timing(result.p50_ms, result.p99_ms, result.requests_per_second)


def timed(tool: str, url: str, path: Path, duration_s: float) -> Timing:
    """Sequential ``/predict`` requests of the bodies in ``path``, with ``tool``."""
    if tool == "httpx":
        return sequential(url, path, duration_s)
    return with_wrk(url, path, duration_s)
