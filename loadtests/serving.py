"""Section 3, serving: ``/predict`` throughput and latency next to the framework's ceiling.

The model is first learned from the Criteo head file by a real worker (which then stops), so
``/predict`` reads real state. The real ``online-ctr api`` and the bare app
(:mod:`loadtests.bare_app`: same request model parsed, constant answer, same uvicorn
settings) then take the same load from ``wrk`` (Debian package): one generator thread,
``CONNECTIONS`` keep-alive connections each with one request in flight, for a fixed duration,
POSTing the Criteo rows as bodies (``loadtests/wrk/post_bodies.lua``). Targets alternate
within each round, so that a change in the shared machine's load hits them alike; the ratio is
taken per round and its median reported. ``POST /noop`` on the bare app (the body is never
parsed) shows what the generator can drive, and ``/proc`` shows the cores each process used.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from loadtests import feed, tools
from loadtests.processes import Stack, scratch_dir
from loadtests.report import BenchOptions, Cell, Section, table, verdict
from loadtests.stats import CpuMeter
from loadtests.tools import WrkResult

CONNECTIONS = 32
BATCH_CONNECTIONS = 8
BATCH_SIZES = (100, 1000)
TARGET_RATIO = 0.8
#: What each endpoint is, by its short name.
ENDPOINTS = {
    "noop": "bare `/noop` (body not parsed)",
    "bare": "bare `/predict` (parse, constant)",
    "predict": "`/predict` (online-ctr api)",
}


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
        return self.cores["api" if self.endpoint == "predict" else "bare"]

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


@dataclass(frozen=True)
class Load:
    """What to send: the bodies and how many examples each holds, how hard, how long."""

    bodies: Path
    batch: int
    connections: int
    duration_s: float


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


def learn_the_file(stack: Stack, rows: list[feed.Row]) -> None:
    """A real worker learns the rows once, then stops: /predict then reads real state."""
    client = stack.client()
    feed.feed(client, feed.entries(rows), len(rows))
    stack.start_workers(1)
    feed.wait_for_step(client, len(rows), 300, stack.check_alive)
    stack.stop(*stack.workers())
    client.close()


def measure(data_dir: Path, quick: bool) -> list[LoadRun]:
    """Single-example rounds (noop, bare, predict alternating), then the batch shapes."""
    duration_s, rounds, warm_up_s = (3.0, 1, 2.0) if quick else (10.0, 3, 8.0)
    rows = feed.criteo_rows(data_dir)
    tools.require("wrk")
    runs = []
    with scratch_dir("serving") as folder, Stack(Path(folder)) as stack:
        learn_the_file(stack, rows)
        api, bare = stack.start_api(), stack.start_bare()
        pids = {
            "api": stack.children["api"].pid,
            "bare": stack.children["bare"].pid,
            "redis": stack.redis_pid,
        }
        single = write_bodies(Path(folder) / "single.jsonl", rows, 1)
        targets = {"noop": f"{bare}/noop", "bare": f"{bare}/predict", "predict": f"{api}/predict"}
        for name, url in targets.items():  # warm-up: about one pass over the rows' names
            load(name, url, Load(single, 1, CONNECTIONS, warm_up_s), pids)
        timed = Load(single, 1, CONNECTIONS, duration_s)
        for _ in range(rounds):
            runs += [load(name, url, timed, pids) for name, url in targets.items()]
        for batch in BATCH_SIZES:
            bodies = write_bodies(Path(folder) / f"batch{batch}.jsonl", rows, batch)
            how = Load(bodies, batch, BATCH_CONNECTIONS, duration_s)
            runs += [load(name, targets[name], how, pids) for name in ("bare", "predict")]
    return runs


def single(runs: list[LoadRun], endpoint: str) -> list[LoadRun]:
    """The single-example runs against ``endpoint``."""
    return [r for r in runs if r.endpoint == endpoint and r.batch == 1]


def ratios(runs: list[LoadRun]) -> list[float]:
    """Per round, single ``/predict`` requests/s over the bare endpoint's."""
    predict = [r.wrk.requests_per_second for r in single(runs, "predict")]
    bare = [r.wrk.requests_per_second for r in single(runs, "bare")]
    return [p / b for p, b in zip(predict, bare, strict=True)]


def rows_of(runs: list[LoadRun]) -> list[list[Cell]]:
    return [
        [
            run.label,
            run.connections,
            run.wrk.requests_per_second,
            run.examples_per_second,
            run.wrk.p50_ms,
            run.wrk.p99_ms,
            run.server_cores,
            run.cores["redis"],
            run.cores["wrk"],
        ]
        for run in runs
    ]


def median_rps(runs: list[LoadRun], endpoint: str) -> float:
    return statistics.median(r.wrk.requests_per_second for r in single(runs, endpoint))


def render(runs: list[LoadRun]) -> str:
    """The section's Markdown: every run, then the ratio and its verdict."""
    each = ratios(runs)
    ratio = statistics.median(each)
    noop, predict = median_rps(runs, "noop"), median_rps(runs, "predict")
    header = ["endpoint", "connections", "requests/s", "examples/s", "p50 ms", "p99 ms"]
    header += ["server cores", "Redis cores", "wrk cores"]
    return "\n\n".join(
        [
            f"wrk, 1 thread, closed loop ({CONNECTIONS} connections single, "
            f"{BATCH_CONNECTIONS} for batches), Criteo rows as bodies; the model was learned "
            "from the Criteo head file first, and each endpoint warmed up before the timed "
            "rounds (so the API's hasher has seen most feature names once). Bare app: same "
            "request model parsed, constant answer, same uvicorn settings as `online-ctr api`. "
            "Cores: average over the run "
            "from /proc (the machine has 2, shared with other engineers' work).",
            table(header, rows_of(runs), digits=2),
            f"Single `/predict` over the bare endpoint, median of {len(each)} alternating "
            f"rounds: {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in each)}). Target "
            f">= {TARGET_RATIO:g}: {verdict(ratio >= TARGET_RATIO)}.",
            f"Generator: the same wrk drives `/noop` at {noop:,.0f} requests/s, "
            f"{noop / predict:.1f}x what `/predict` answers, and uses the cores in the last "
            "column: it is not what limits `/predict`.",
        ]
    )


def run(options: BenchOptions) -> Section:
    """Section 3 for ``loadtests.bench``."""
    runs = measure(options.data_dir, options.quick)
    ratio = statistics.median(ratios(runs))
    return Section(
        title="Serving",
        markdown=render(runs),
        summary={
            "predict_requests_per_second": median_rps(runs, "predict"),
            "predict_p99_ms": statistics.median(r.wrk.p99_ms for r in single(runs, "predict")),
            "predict_over_bare": ratio,
            "target_predict_80pct_of_bare": verdict(ratio >= TARGET_RATIO),
        },
    )
