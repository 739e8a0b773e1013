"""Replay throughput: our rules in-process, next to River and Vowpal Wabbit on the same examples.

Run ``python -m loadtests.bench.bench_replay [--examples 200000] [--batch-sizes 1,256,1024]
[--rules all]``. The Criteo head file is parsed once (``online_ctr.learning.readers``) and repeated
up to
``--examples``; every system starts from those ``field -> value`` dicts in memory, learns them
in order and scores each example before learning it (progressive validation). What each timing
includes is in :data:`MODES`; River and VW run FTRL-Proximal with our FTRL's hyper-parameters.

Every job is warmed up once on the first 10,000 examples. Then the jobs are timed in rounds,
each once per round, so that the load of a shared machine falls alike on all of them; a job
whose first run took ``--cheap-seconds`` of CPU time or more is not repeated. Medians are
reported, as examples per wall-clock second and per CPU second (this process and its children:
the CPU figure is the one to trust when other work competes for the cores). Log loss is printed
next to throughput, so nobody wins by computing garbage. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.bench import _river, _vw
from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import log_loss, sigmoid
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.rules.ftrl import FTRLParams
from testkit.paths import CRITEO

WARM_UP_EXAMPLES = 10_000

#: Every timed mode, by name, and what its time includes.
MODES = {
    "replay": "online_ctr.learning.replay.replay: FeatureHasher.batch from the dicts, "
    "InMemoryModel.learn, "
    "metric sums, and its end-of-run AUC and nonzero recount (~1.5%)",
    "river": "per dict: build {'field=value': 1.0, '': 1.0}, predict_proba_one, learn_one",
    "pyvw-text": "per dict: build a VW text line, Workspace.parse (VW hashes the names), learn; "
    "workspace set-up not timed",
    "pyvw-file": "Workspace(-d file) from start to finish: VW's native parser (own thread) and "
    "learner over a pre-written text file (writing it not timed)",
    "vw-cli": "the whole `{command} -d file` process, interpreter start-up included",
}

LabelledExamples = Sequence[tuple[Any, int]]


@dataclass(frozen=True)
class Run:
    """One timed pass over the examples."""

    seconds: float
    cpu_seconds: float
    log_loss: float | None


class Stopwatch:
    """Wall-clock and CPU time since it was made; CPU counts finished child processes too."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), _cpu_seconds()

    def stop(self, loss: float | None) -> Run:
        return Run(time.perf_counter() - self.wall, _cpu_seconds() - self.cpu, loss)


def _cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@dataclass(frozen=True)
class Measurement:
    """The repeated runs of one system, mode, rule and batch size."""

    system: str
    mode: str
    rule: str
    batch_size: int
    examples: int
    seconds: tuple[float, ...] = ()
    cpu_seconds: tuple[float, ...] = ()
    log_loss: float | None = None

    @property
    def examples_per_second(self) -> float:
        return self.examples / statistics.median(self.seconds)

    @property
    def examples_per_cpu_second(self) -> float:
        return self.examples / statistics.median(self.cpu_seconds)

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON line."""
        return {
            **asdict(self),
            "seconds": list(self.seconds),
            "cpu_seconds": list(self.cpu_seconds),
            "examples_per_second": self.examples_per_second,
            "examples_per_cpu_second": self.examples_per_cpu_second,
        }


@dataclass(frozen=True)
class Job:
    """What to measure, how to warm it up and how to time one run of it."""

    label: Measurement
    warm_up: Callable[[], Run]
    run: Callable[[], Run]
    runs: list[Run] = field(default_factory=list)


def measure_all(
    jobs: Sequence[Job], repeats: int, cheap_s: float, report: Callable[[Job], None] | None = None
) -> list[Measurement]:
    """Warm every job up, then run them in ``repeats`` rounds; a slow first run is not repeated.

    Slow means in CPU time, which another process's load does not inflate.
    """
    for job in jobs:
        job.warm_up()
    for round_ in range(repeats):
        for job in jobs:
            if round_ == 0 or job.runs[0].cpu_seconds < cheap_s:
                job.runs.append(job.run())
                if report is not None:
                    report(job)
    return [
        replace(
            job.label,
            seconds=tuple(r.seconds for r in job.runs),
            cpu_seconds=tuple(r.cpu_seconds for r in job.runs),
            log_loss=job.runs[0].log_loss,
        )
        for job in jobs
    ]


def replicate(rows: Sequence[Any], examples: int) -> list[Any]:
    """``rows`` repeated in order until there are ``examples`` of them."""
    copies = -(-examples // len(rows))
    return (list(rows) * copies)[:examples]


def mean_log_loss(p: np.ndarray, rows: LabelledExamples) -> float:
    labels = np.fromiter((label for _, label in rows), np.float64, len(rows))
    return float(log_loss(p, labels).mean())


def run_ours(rows: LabelledExamples, rule: str, batch_size: int) -> Run:
    # Without the base-rate prior: the same algorithm as VW's --ftrl and River's, so the log
    # losses check that every system learned the same stream (the prior costs one log an
    # example).
    model = InMemoryModel(get_rule(rule), base_rate=BaseRate("off"))
    hasher = FeatureHasher()
    watch = Stopwatch()
    result = replay(rows, model, hasher, batch_size)
    return watch.stop(result.logloss)


def run_river(rows: LabelledExamples, params: FTRLParams) -> Run:
    model = _river.ftrl_model(params.alpha, params.beta, params.l1, params.l2)
    watch = Stopwatch()
    p = _river.progressive_probabilities(model, rows)
    return replace(watch.stop(None), log_loss=mean_log_loss(p, rows))


def run_pyvw_text(rows: LabelledExamples, params: FTRLParams) -> Run:
    vw = _vw.workspace(vw_arguments(params))
    encoder = _vw.TextEncoder()
    watch = Stopwatch()
    scores = _vw.learn_scores(vw, (encoder.line(example, label) for example, label in rows))
    run = watch.stop(None)
    vw.finish()
    return replace(run, log_loss=mean_log_loss(sigmoid(scores), rows))


def run_pyvw_file(path: Path, params: FTRLParams, examples: int) -> Run:
    watch = Stopwatch()
    vw = _vw.workspace([*vw_arguments(params), f"--data={path}"])
    loss, seen = _vw.average_loss(vw), vw.get_weighted_examples()
    vw.finish()
    run = watch.stop(loss)
    if seen != examples:
        raise RuntimeError(f"VW learned {seen} examples, expected {examples}")
    return run


def run_vw_cli(path: Path, params: FTRLParams, examples: int) -> Run:
    command = [*vw_command(), *vw_arguments(params, quiet=False), f"--data={path}"]
    watch = Stopwatch()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    run = watch.stop(None)
    summary = _vw.parse_summary(done.stdout + done.stderr)
    if summary.examples != examples:
        raise RuntimeError(f"vw read {summary.examples} examples, expected {examples}")
    return replace(run, log_loss=summary.average_loss)


def vw_arguments(params: FTRLParams, quiet: bool = True) -> list[str]:
    """VW's FTRL with our hyper-parameters, hashing feature names at 32 bits like VW users do."""
    p = params
    return _vw.ftrl_arguments(p.alpha, p.beta, p.l1, p.l2, bits=_vw.NAME_BITS, quiet=quiet)


def vw_command() -> list[str]:
    """A ``vw`` binary if there is one; the pip package has none, but runs as a module."""
    binary = shutil.which("vw")
    return [binary] if binary else [sys.executable, "-m", "vowpalwabbit"]


def ratios(measurements: Sequence[Measurement], cpu: bool = False) -> dict[str, float]:
    """Our FTRL throughput over each other system's, per batch size of ours."""
    return {
        f"ftrl_b{m.batch_size}_over_{other.mode}": _speed(m, cpu) / _speed(other, cpu)
        for m in _ours_ftrl(measurements)
        for other in measurements
        if other.system != "online-ctr"
    }


def target(
    measurements: Sequence[Measurement], cpu: bool = False, minimum: float = 5.0
) -> dict[str, Any]:
    """The issue's target: our FTRL at some B >= 256 at least ``minimum`` x River's throughput."""
    ours = [_speed(m, cpu) for m in _ours_ftrl(measurements) if m.batch_size >= 256]
    river = [_speed(m, cpu) for m in measurements if m.system == "river"]
    best = max(ours) / river[0] if ours and river else None
    return {"minimum": minimum, "best_ratio": best, "met": best is not None and best >= minimum}


def _speed(m: Measurement, cpu: bool) -> float:
    return m.examples_per_cpu_second if cpu else m.examples_per_second


def _ours_ftrl(measurements: Sequence[Measurement]) -> list[Measurement]:
    return [m for m in measurements if m.system == "online-ctr" and m.rule == "ftrl"]


def format_table(measurements: Sequence[Measurement]) -> str:
    """A fixed-width table, one line per measurement."""
    lines = [
        f"{'system':<11} {'mode':<10} {'rule':<10} {'B':>5} {'examples/s':>11} "
        f"{'ex/CPU-s':>9} {'runs':>4} {'log loss':>9}"
    ]
    for m in measurements:
        loss = "n/a" if m.log_loss is None else f"{m.log_loss:.5f}"
        lines.append(
            f"{m.system:<11} {m.mode:<10} {m.rule:<10} {m.batch_size:>5} "
            f"{m.examples_per_second:>11,.0f} {m.examples_per_cpu_second:>9,.0f} "
            f"{len(m.seconds):>4} {loss:>9}"
        )
    return "\n".join(lines)


def format_ratios(wall: dict[str, float], cpu: dict[str, float]) -> str:
    return "\n".join(
        f"  {name:<28} {ratio:6.2f}x wall  {cpu[name]:6.2f}x CPU" for name, ratio in wall.items()
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench.bench_replay", description=__doc__
    )
    parser.add_argument("--data", type=Path, default=CRITEO, help="a Criteo file to replay")
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--batch-sizes", type=_int_list, default=[1, 256, 1024])
    parser.add_argument("--rules", type=_rules, default=sorted(RULES), help="all, or a list")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cheap-seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    if args.examples < 1 or args.repeats < 1 or min(args.batch_sizes) < 1:
        parser.error("--examples, --repeats and every batch size must be >= 1")
    return args


def _int_list(text: str) -> list[int]:
    return [int(item) for item in text.split(",") if item]


def _rules(text: str) -> list[str]:
    names = sorted(RULES) if text == "all" else [n for n in text.split(",") if n]
    for name in names:
        get_rule(name)  # a ValueError naming the rules there are, which argparse reports
    return names


def reference_jobs(rows: list[Any], folder: Path) -> list[Job]:
    """River and the three VW modes, on FTRL with our FTRL's hyper-parameters."""
    params, warm = FTRLParams(), rows[:WARM_UP_EXAMPLES]
    data, warm_data = folder / "replay.vw", folder / "warm.vw"
    _vw.write_lines(data, _vw.TextEncoder().lines(rows))
    _vw.write_lines(warm_data, _vw.TextEncoder().lines(warm))
    jobs = []
    for system, mode, run in (("river", "river", run_river), ("vw", "pyvw-text", run_pyvw_text)):
        label = Measurement(system, mode, "ftrl", 1, len(rows))
        jobs.append(Job(label, partial(run, warm, params), partial(run, rows, params)))
    for mode, run_file in (("pyvw-file", run_pyvw_file), ("vw-cli", run_vw_cli)):
        label = Measurement("vw", mode, "ftrl", 1, len(rows))
        warm_up = partial(run_file, warm_data, params, len(warm))
        jobs.append(Job(label, warm_up, partial(run_file, data, params, len(rows))))
    return jobs


def our_jobs(rows: list[Any], rules: Sequence[str], batch_sizes: Sequence[int]) -> list[Job]:
    """Our replay for every rule and batch size, FTRL first."""
    warm = rows[:WARM_UP_EXAMPLES]
    return [
        Job(
            Measurement("online-ctr", "replay", rule, b, len(rows)),
            partial(run_ours, warm, rule, b),
            partial(run_ours, rows, rule, b),
        )
        for rule in sorted(rules, key=lambda name: name != "ftrl")
        for b in batch_sizes
    ]


def print_progress(job: Job) -> None:
    run = job.runs[-1]
    m = job.label
    print(
        f"{m.system} {m.mode} {m.rule} B={m.batch_size}: run {len(job.runs)} "
        f"{run.seconds:.2f} s wall, {run.cpu_seconds:.2f} s CPU",
        file=sys.stderr,
        flush=True,
    )


def machine() -> dict[str, Any]:
    """Where the figures come from: on a shared machine, the load matters."""
    return {
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
        **{package: version(package) for package in ("numpy", "river", "vowpalwabbit")},
    }


def build_report(
    args: argparse.Namespace, measurements: list[Measurement], started: dict[str, Any]
) -> dict[str, Any]:
    """Every figure, for the JSON line."""
    command = " ".join(vw_command())
    return {
        "benchmark": "replay",
        "data": str(args.data),
        "examples": args.examples,
        "repeats": args.repeats,
        "ftrl_params": asdict(FTRLParams()),
        "modes": {mode: text.replace("{command}", command) for mode, text in MODES.items()},
        "machine_at_start": started,
        "load_average_1m_at_end": os.getloadavg()[0],
        "results": [m.as_dict() for m in measurements],
        "ratios": ratios(measurements),
        "cpu_ratios": ratios(measurements, cpu=True),
        "target": target(measurements),
        "cpu_target": target(measurements, cpu=True),
    }


def print_report(report: dict[str, Any], measurements: list[Measurement]) -> None:
    """The table, what each timing includes, the ratios, the target; then the JSON line."""
    print(format_table(measurements))
    print("\nWhat each timing includes:")
    print("\n".join(f"  {mode}: {text}" for mode, text in report["modes"].items()))
    print("\nOur FTRL at batch size B over each other system (examples per second):")
    print(format_ratios(report["ratios"], report["cpu_ratios"]))
    for kind, clock in (("target", "wall clock"), ("cpu_target", "CPU time")):
        goal = report[kind]
        best = "not measured" if goal["best_ratio"] is None else f"best {goal['best_ratio']:.2f}x"
        verdict = "met" if goal["met"] else "NOT met"
        print(
            f"Target, FTRL at B >= 256 >= {goal['minimum']:g}x River ({clock}): {best}, {verdict}"
        )
    print(json.dumps(report, allow_nan=False))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows = replicate(list(read_examples(args.data, "criteo")), args.examples)
    started = machine()
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as folder:
        jobs = reference_jobs(rows, Path(folder)) + our_jobs(rows, args.rules, args.batch_sizes)
        measurements = measure_all(jobs, args.repeats, args.cheap_seconds, print_progress)
    print_report(build_report(args, measurements, started), measurements)
    return 0


if __name__ == "__main__":
    sys.exit(main())
