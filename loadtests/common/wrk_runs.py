"""One ``wrk`` run against one endpoint of a running process: the bodies it posts, how hard
and how long, and what it measured with the cores each process used meanwhile.

``wrk`` (Debian package) runs one generator thread with ``connections`` keep-alive
connections, each with one request in flight, for a fixed duration, POSTing the bodies of a
file in turn (``loadtests/common/wrk/post_bodies.lua``); any answer that is not 2xx fails the run
rather than counting as throughput.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from loadtests.common import tools
from loadtests.common.stats import CpuMeter
from loadtests.common.tools import WrkResult

#: What each endpoint is, by its short name.
ENDPOINTS = {
    "noop": "bare `/noop` (body not parsed)",
    "bare": "bare `/predict` (parse, constant)",
    "predict": "`/predict` (online-ctr api)",
    "learn": "`/learn` (online-ctr api, no worker)",
}


@dataclass(frozen=True)
class Load:
    """What to send: the bodies and how many examples each holds, how hard, how long."""

    bodies: Path
    batch: int
    connections: int
    duration_s: float


@dataclass(frozen=True)
class LoadRun:
    """One wrk run against one endpoint, and the cores each process used meanwhile."""

    endpoint: str
    batch: int
    connections: int
    wrk: WrkResult
    cores: dict[str, float]

    @property
    def label(self) -> str:
        shape = "single" if self.batch == 1 else f"batch of {self.batch:,}"
        return f"{ENDPOINTS[self.endpoint]}, {shape}"

    @property
    def server_cores(self) -> float:
        return self.cores["api" if self.endpoint in ("predict", "learn") else "bare"]

    @property
    def examples_per_second(self) -> float:
        return self.wrk.requests_per_second * self.batch


def write_bodies(path: Path, rows: Iterable[tuple[Mapping[str, object], int]], batch: int) -> Path:
    """``/predict`` bodies, one JSON document per line: single-example ones if ``batch`` is
    1, else ``{"examples": [...]}`` of ``batch`` consecutive rows (a partial last one dropped)."""
    features = [dict(example) for example, _ in rows]
    with path.open("w", encoding="utf-8") as out:
        if batch == 1:
            for x in features:
                out.write(json.dumps({"features": x}, separators=(",", ":")) + "\n")
        else:
            for start in range(0, len(features) - batch + 1, batch):
                chunk = [{"features": x} for x in features[start : start + batch]]
                out.write(json.dumps({"examples": chunk}, separators=(",", ":")) + "\n")
    return path


def write_learn_bodies(
    path: Path, rows: Iterable[tuple[Mapping[str, object], int]], batch: int
) -> Path:
    """``/learn`` bodies of ``batch`` consecutive labelled rows each, one a line (a partial
    last one dropped)."""
    examples = [{"features": dict(x), "label": y} for x, y in rows]
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, len(examples) - batch + 1, batch):
            chunk = {"examples": examples[start : start + batch]}
            out.write(json.dumps(chunk, separators=(",", ":")) + "\n")
    return path


def load(endpoint: str, url: str, how: Load, pids: dict[str, int]) -> LoadRun:
    """One wrk run; ``reaped`` in the cores is wrk itself (the only child waited for)."""
    meter = CpuMeter(pids)
    command = tools.wrk_command(url, how.bodies, how.connections, how.duration_s)
    done = subprocess.run(command, capture_output=True, text=True, timeout=how.duration_s + 120)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr[-2000:]}")
    cores = meter.cores()
    result = tools.parse_wrk(done.stdout)
    if result.errors:
        raise RuntimeError(f"{url}: {result.errors} failed requests; wrk said:\n{done.stdout}")
    cores["wrk"] = cores.pop("reaped")
    return LoadRun(endpoint, how.batch, how.connections, result, cores)
