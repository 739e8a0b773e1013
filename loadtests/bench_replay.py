"""Replay throughput: our rules in-process, next to River and Vowpal Wabbit on the same examples.

Run ``python -m loadtests.bench_replay [--examples 200000] [--batch-sizes 1,256,1024]
[--rules all]``. The Criteo head file is parsed once (``online_ctr.readers``) and repeated up to
``--examples``; every system starts from those ``field -> value`` dicts in memory, learns them
in order and scores each example before learning it (progressive validation). What each timing
includes is in :data:`MODES`. Each system is warmed up once on the first 10,000 examples; then
the timed run is repeated ``--repeats`` times if one run is cheap (under ``--cheap-seconds``) and
the median is reported. Log loss is printed next to throughput, so that nobody wins by computing
garbage. The last line of output is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from loadtests import _river, _vw
from online_ctr.features import FeatureHasher
from online_ctr.learner import log_loss
from online_ctr.model import InMemoryModel
from online_ctr.readers import read_examples
from online_ctr.replay import replay
from online_ctr.rules import RULES, get_rule
from online_ctr.rules.ftrl import FTRLParams

CRITEO = Path(__file__).resolve().parents[2] / "shared/data/criteo/criteo_kaggle_train_head10k.tsv"
WARM_UP_EXAMPLES = 10_000

#: Every timed mode, by name, and what its time includes.
MODES = {
    "replay": "online_ctr.replay: FeatureHasher.batch from the dicts, InMemoryModel.learn, "
    "log-loss sums",
    "river": "per dict: build {'field=value': 1.0, '': 1.0}, predict_proba_one, learn_one",
    "pyvw-text": "per dict: build a VW text line, Workspace.parse (VW hashing), learn; "
    "workspace set-up not timed",
    "pyvw-file": "Workspace(-d file) start to finish: VW's native parser and learner on a "
    "pre-written text file (writing it not timed)",
    "vw-cli": "whole `{command} -d file` process, interpreter start included",
}


@dataclass(frozen=True)
class Run:
    """One timed pass over the examples."""

    seconds: float
    log_loss: float | None


@dataclass(frozen=True)
class Measurement:
    """The repeated runs of one system, mode, rule and batch size."""

    system: str
    mode: str
    rule: str
    batch_size: int
    examples: int
    seconds: tuple[float, ...] = ()
    log_loss: float | None = None

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def examples_per_second(self) -> float:
        return self.examples / self.median_seconds

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON line."""
        return {
            **asdict(self),
            "seconds": list(self.seconds),
            "median_seconds": self.median_seconds,
            "examples_per_second": self.examples_per_second,
        }


Job = Callable[[], Run]


def measure(
    label: Measurement, warm_up: Job, run: Job, repeats: int, cheap_s: float
) -> Measurement:
    """Warm up once, then time ``run`` once, or ``repeats`` times if one run is cheap."""
    warm_up()
    runs = [run()]
    while len(runs) < repeats and runs[0].seconds < cheap_s:
        runs.append(run())
    return replace(label, seconds=tuple(r.seconds for r in runs), log_loss=runs[0].log_loss)


def mean_log_loss(p: np.ndarray, labels: np.ndarray) -> float:
    return float(log_loss(p, labels).mean())


def labels_of(rows: Sequence[tuple[Any, int]]) -> np.ndarray:
    return np.fromiter((label for _, label in rows), np.float64, len(rows))


def replicate(rows: Sequence[Any], examples: int) -> list[Any]:
    """``rows`` repeated in order until there are ``examples`` of them."""
    copies = -(-examples // len(rows))
    return (list(rows) * copies)[:examples]


def run_ours(rows: Sequence[Any], rule: str, batch_size: int) -> Run:
    model = InMemoryModel(get_rule(rule))
    result = replay(rows, model, FeatureHasher(), batch_size)
    return Run(result.seconds, result.logloss)


def run_river(rows: Sequence[Any], params: FTRLParams) -> Run:
    model = _river.ftrl_model(params.alpha, params.beta, params.l1, params.l2)
    started = time.perf_counter()
    p = _river.progressive_probabilities(model, rows)
    return Run(time.perf_counter() - started, mean_log_loss(p, labels_of(rows)))


def run_pyvw_text(rows: Sequence[Any], params: FTRLParams) -> Run:
    vw = _vw.workspace(vw_arguments(params))
    encoder = _vw.TextEncoder()
    started = time.perf_counter()
    scores = _vw.learn_scores(vw, (encoder.line(example, label) for example, label in rows))
    seconds = time.perf_counter() - started
    vw.finish()
    return Run(seconds, mean_log_loss(1.0 / (1.0 + np.exp(-scores)), labels_of(rows)))


def run_pyvw_file(path: Path, params: FTRLParams) -> Run:
    started = time.perf_counter()
    vw = _vw.workspace([*vw_arguments(params), f"--data={path}"])
    loss = _vw.average_loss(vw)
    vw.finish()
    return Run(time.perf_counter() - started, loss)


def vw_arguments(params: FTRLParams, quiet: bool = True) -> list[str]:
    """VW's FTRL with our hyper-parameters, hashing feature names at 32 bits like VW users do."""
    p = params
    return _vw.ftrl_arguments(p.alpha, p.beta, p.l1, p.l2, bits=_vw.NAME_BITS, quiet=quiet)


def vw_command() -> list[str]:
    """A ``vw`` binary if there is one; the pip package has none, but runs as a module."""
    binary = shutil.which("vw")
    return [binary] if binary else [sys.executable, "-m", "vowpalwabbit"]


def run_vw_cli(path: Path, params: FTRLParams, examples: int) -> Run:
    arguments = vw_arguments(params, quiet=False)
    started = time.perf_counter()
    done = subprocess.run(
        [*vw_command(), *arguments, f"--data={path}"], capture_output=True, text=True, check=True
    )
    seconds = time.perf_counter() - started
    summary = _vw.parse_summary(done.stdout + done.stderr)
    if summary.examples != examples:
        raise RuntimeError(f"vw read {summary.examples} examples, expected {examples}")
    return Run(seconds, summary.average_loss)


def ratios(measurements: Sequence[Measurement]) -> dict[str, float]:
    """Our FTRL throughput over each other system's, per batch size of ours."""
    return {
        f"ftrl_b{m.batch_size}_over_{other.mode}": m.examples_per_second / other.examples_per_second
        for m in _ours_ftrl(measurements)
        for other in measurements
        if other.system != "online-ctr"
    }


def _ours_ftrl(measurements: Sequence[Measurement]) -> list[Measurement]:
    return [m for m in measurements if m.system == "online-ctr" and m.rule == "ftrl"]


def target(measurements: Sequence[Measurement], minimum: float = 5.0) -> dict[str, Any]:
    """The issue's target: FTRL at some B >= 256 at least ``minimum`` x River's throughput."""
    river = [m.examples_per_second for m in measurements if m.system == "river"]
    ours = [m.examples_per_second for m in _ours_ftrl(measurements) if m.batch_size >= 256]
    best = max(ours) / river[0] if ours and river else None
    return {
        "minimum": minimum,
        "best_ratio_over_river": best,
        "met": best is not None and best >= minimum,
    }


def format_table(measurements: Sequence[Measurement]) -> str:
    """A fixed-width table, one line per measurement."""
    lines = [
        f"{'system':<11} {'mode':<10} {'rule':<10} {'B':>5} {'examples/s':>11} "
        f"{'median s':>9} {'runs':>4} {'log loss':>9}"
    ]
    for m in measurements:
        loss = "n/a" if m.log_loss is None else f"{m.log_loss:.5f}"
        lines.append(
            f"{m.system:<11} {m.mode:<10} {m.rule:<10} {m.batch_size:>5} "
            f"{m.examples_per_second:>11,.0f} {m.median_seconds:>9.2f} {len(m.seconds):>4} "
            f"{loss:>9}"
        )
    return "\n".join(lines)


def format_ratios(ratio_by_name: dict[str, float]) -> str:
    return "\n".join(f"  {name}: {ratio:.2f}x" for name, ratio in ratio_by_name.items())


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_replay", description=__doc__)
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
        get_rule(name)  # a ValueError names the rules there are; argparse reports it
    return names


def ours_measurements(rows: list[Any], args: argparse.Namespace) -> list[Measurement]:
    warm = rows[:WARM_UP_EXAMPLES]
    out = []
    for rule in args.rules:
        for b in args.batch_sizes:
            label = Measurement("online-ctr", "replay", rule, b, len(rows))
            job = partial(run_ours, rows, rule, b)
            warm_up = partial(run_ours, warm, rule, b)
            out.append(measure(label, warm_up, job, args.repeats, args.cheap_seconds))
            print(format_table(out[-1:]).splitlines()[1], file=sys.stderr, flush=True)
    return out


def reference_measurements(
    rows: list[Any], args: argparse.Namespace, folder: Path
) -> list[Measurement]:
    params = FTRLParams()
    warm = rows[:WARM_UP_EXAMPLES]
    data, warm_data = folder / "replay.vw", folder / "warm.vw"
    encoder = _vw.TextEncoder()
    _vw.write_lines(data, (encoder.line(example, label) for example, label in rows))
    _vw.write_lines(warm_data, (encoder.line(example, label) for example, label in warm))
    jobs = {
        ("river", "river"): (partial(run_river, warm, params), partial(run_river, rows, params)),
        ("vw", "pyvw-text"): (
            partial(run_pyvw_text, warm, params),
            partial(run_pyvw_text, rows, params),
        ),
        ("vw", "pyvw-file"): (
            partial(run_pyvw_file, warm_data, params),
            partial(run_pyvw_file, data, params),
        ),
        ("vw", "vw-cli"): (
            partial(run_vw_cli, warm_data, params, len(warm)),
            partial(run_vw_cli, data, params, len(rows)),
        ),
    }
    out = []
    for (system, mode), (warm_up, job) in jobs.items():
        label = Measurement(system, mode, "ftrl", 1, len(rows))
        out.append(measure(label, warm_up, job, args.repeats, args.cheap_seconds))
        print(format_table(out[-1:]).splitlines()[1], file=sys.stderr, flush=True)
    return out


def machine() -> dict[str, Any]:
    """Where the figures come from: a shared machine's load matters."""
    return {
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
        **{package: version(package) for package in ("numpy", "river", "vowpalwabbit")},
    }


def build_report(
    args: argparse.Namespace,
    rows: list[Any],
    measurements: list[Measurement],
    started: dict[str, Any],
) -> dict[str, Any]:
    """Every figure, for the JSON line."""
    ratio_by_name = ratios(measurements)
    return {
        "benchmark": "replay",
        "data": str(args.data),
        "examples": len(rows),
        "repeats": args.repeats,
        "ftrl_params": asdict(FTRLParams()),
        "modes": {
            mode: text.replace("{command}", " ".join(vw_command())) for mode, text in MODES.items()
        },
        "machine_at_start": started,
        "load_average_1m_at_end": os.getloadavg()[0],
        "results": [m.as_dict() for m in measurements],
        "ratios": ratio_by_name,
        "target": target(measurements),
    }


def print_report(report: dict[str, Any], measurements: list[Measurement]) -> None:
    """The table, what each timing includes, the ratios, the target; then the JSON line."""
    goal = report["target"]
    best = goal["best_ratio_over_river"]
    verdict = f"best {best:.2f}x, {'met' if goal['met'] else 'NOT met'}" if best else "not measured"
    print(format_table(measurements))
    print("\nWhat each timing includes:")
    print("\n".join(f"  {mode}: {text}" for mode, text in report["modes"].items()))
    print("\nRatios (examples/s of our FTRL at batch size B over the other system's):")
    print(format_ratios(report["ratios"]))
    print(f"\nTarget, FTRL at B >= 256 >= {goal['minimum']:g}x River: {verdict}")
    print(json.dumps(report, allow_nan=False))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows = replicate(list(read_examples(args.data, "criteo")), args.examples)
    started = machine()
    measurements = ours_measurements(rows, args)
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as folder:
        measurements += reference_measurements(rows, args, Path(folder))
    print_report(build_report(args, rows, measurements, started), measurements)
    return 0


if __name__ == "__main__":
    sys.exit(main())
