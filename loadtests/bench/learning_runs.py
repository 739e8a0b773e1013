"""The runs behind the learning section: the replay command and one worker, next to Vowpal
Wabbit and River on the same rows.

The Criteo head file is repeated to ``examples`` rows (200,000 in a full run) and learned,
example by example in file order, with FTRL at its default hyper-parameters, by:

- ``online-ctr replay`` on a file of those rows, the whole process timed (interpreter
  start-up, reading, hashing, learning, the JSON report), its default exact semantics;
- Vowpal Wabbit's native ``--ftrl`` on the same rows in its text format, the whole process
  timed (:func:`loadtests.bench.bench_replay.run_vw_cli`; writing the file not timed);
- River's ``learn_one`` in-process on the same rows, parsed once (reading not timed);
- one real ``online-ctr worker`` draining a stream pre-filled with the rows
  (:mod:`loadtests.bench.drain`), in entries of 1 and of 1,000 examples.

The processes are timed in rounds, alternating, and the median kept
(:func:`loadtests.bench.bench_replay.measure_all`). Every learner's progressive log loss is shown
beside its speed, and one no better than always predicting the running mean is broken: it is
not compared (:mod:`loadtests.bench.baseline`).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import cycle, islice
from pathlib import Path

from loadtests.bench import _vw, baseline, bench_replay
from loadtests.bench.bench_replay import Job, Measurement, Run, Stopwatch
from loadtests.bench.drain import DrainRun, run_learner
from loadtests.common import feed
from loadtests.common.processes import Stack, scratch_dir
from online_ctr.learning.rules.ftrl import FTRLParams
from testkit.paths import ROOT

#: Entry sizes of the drain: a single-example ``/learn`` each, and 1,000-example bodies.
ENTRY_SIZES = (1, 1000)
#: Drains of each entry size, alternating.
DRAIN_ROUNDS = 3
#: What each timed learner is called in the report.
NAMES = {
    "replay": "`online-ctr replay`, whole process",
    "vw-cli": "Vowpal Wabbit native `--ftrl`, whole process",
    "river": "River `FTRLProximal.learn_one`, in-process",
}


@dataclass
class LearningResult:
    """Everything the section measured, and the mean's log loss on the same rows."""

    examples: int
    mean_logloss: float
    timed: list[Measurement] = field(default_factory=list)
    drains: list[DrainRun] = field(default_factory=list)

    def of(self, mode: str) -> Measurement:
        return next(m for m in self.timed if m.mode == mode)

    def judged_drain(self) -> DrainRun:
        """The drain the target judges: of the runs with the largest entries, the median
        (one drain is a second or two, so one run alone swings with the machine)."""
        largest = [run for run in self.drains if run.per_entry == ENTRY_SIZES[-1]]
        ranked = sorted(largest, key=lambda run: run.examples_per_second)
        return ranked[(len(ranked) - 1) // 2]

    def broken(self, logloss: float | None) -> str:
        return baseline.broken(logloss, None, self.mean_logloss)


def write_rows(source: Path, path: Path, count: int) -> Path:
    """``source``'s lines in order, again and again, until there are ``count`` of them."""
    with source.open("rb") as lines:
        head = [line if line.endswith(b"\n") else line + b"\n" for line in lines]
    path.write_bytes(b"".join(islice(cycle(head), count)))
    return path


def run_replay(path: Path, examples: int) -> Run:
    """The whole ``online-ctr replay FILE`` process at its defaults, from start to exit."""
    command = [sys.executable, "-m", "online_ctr.cli.main", "replay", str(path)]
    watch = Stopwatch()
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    run = watch.stop(None)
    report = json.loads(done.stdout.splitlines()[-1])
    if report["examples"] != examples:
        raise RuntimeError(f"replay learned {report['examples']} examples, expected {examples}")
    return replace(run, log_loss=float(report["logloss"]))


def jobs(folder: Path, rows: list[feed.Row], criteo: Path) -> list[Job]:
    """Replay, VW and River on the same rows, each warmed up on the first 10,000."""
    params, n = FTRLParams(), len(rows)
    warm = rows[: bench_replay.WARM_UP_EXAMPLES]
    data, warm_data = folder / "rows.tsv", folder / "warm.tsv"
    write_rows(criteo, data, n)
    write_rows(criteo, warm_data, len(warm))
    text, warm_text = folder / "rows.vw", folder / "warm.vw"
    _vw.write_lines(text, _vw.TextEncoder().lines(rows))
    _vw.write_lines(warm_text, _vw.TextEncoder().lines(warm))
    return [
        Job(
            Measurement("online-ctr", "replay", "ftrl", 1, n),
            partial(run_replay, warm_data, len(warm)),
            partial(run_replay, data, n),
        ),
        Job(
            Measurement("vw", "vw-cli", "ftrl", 1, n),
            partial(bench_replay.run_vw_cli, warm_text, params, len(warm)),
            partial(bench_replay.run_vw_cli, text, params, n),
        ),
        Job(
            Measurement("river", "river", "ftrl", 1, n),
            partial(bench_replay.run_river, warm, params),
            partial(bench_replay.run_river, rows, params),
        ),
    ]


def measure(data_dir: Path, examples: int, quick: bool) -> LearningResult:
    """Every learning figure of the section, in one run."""
    file_rows = feed.criteo_rows(data_dir)
    rows = bench_replay.replicate(file_rows, examples)
    labels = [label for _, label in rows]
    result = LearningResult(examples, baseline.running_mean_logloss(labels))
    with tempfile.TemporaryDirectory(prefix="octr-learning-") as folder:
        timed = jobs(Path(folder), rows, data_dir / feed.CRITEO)
        # Every learner runs in every round (up to a minute of CPU each), so the ratios
        # compare runs made side by side.
        result.timed = bench_replay.measure_all(timed, 1 if quick else 3, cheap_s=60.0)
    with scratch_dir("learning") as folder, Stack(Path(folder)) as stack:
        for _ in range(1 if quick else DRAIN_ROUNDS):
            for per_entry in ENTRY_SIZES:
                n = examples - examples % per_entry
                result.drains.append(run_learner(stack, file_rows, n, per_entry))
    return result


def ratio(result: LearningResult, value: float, logloss: float | None, other: str) -> float:
    """``value`` over another learner's examples/s; NaN if either model is broken."""
    theirs = result.of(other)
    if result.broken(logloss) or result.broken(theirs.log_loss):
        return math.nan
    return value / theirs.examples_per_second
