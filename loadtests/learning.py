"""Section 2, learning throughput: real workers through Redis next to in-process learners.

The Criteo head file is repeated to ``examples`` rows and learned by: 1 and 2 real workers at
two batch sizes (:mod:`loadtests.drain`: single-example stream entries, filled before the
workers start); our in-process replay at the same batch sizes; River's ``learn_one``; and
Vowpal Wabbit's native learner over a file (what each in-process timing includes is in
:data:`loadtests.bench_replay.MODES`). Next to them, Redis's own ceiling for the commands the
workers use (:mod:`loadtests.redis_ceiling`) and the workers' share of it.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from loadtests import _vw, bench_replay, feed, redis_ceiling
from loadtests.bench_replay import Job, Measurement
from loadtests.drain import WorkerRun, run_workers
from loadtests.processes import Stack, scratch_dir
from loadtests.report import BenchOptions, Cell, Section, table, verdict
from online_ctr.rules.ftrl import FTRLParams

BATCH_SIZES = (512, 4096)
WORKER_COUNTS = (1, 2)
TARGET_OVER_RIVER = 2.0
THROUGHPUT_HEADER = ["learner", "batch", "examples/s", "x River", "examples/CPU-s"]
THROUGHPUT_HEADER += ["cores used", "log loss"]
#: What each in-process learner is called in the table.
IN_PROCESS = {
    "online-ctr": "online-ctr replay, in-process",
    "river": "River `learn_one`, in-process",
    "vw": "Vowpal Wabbit native, `-d` file",
}
REDIS_HEADER = ["workers", "batch", "Redis ops/s", "ceiling ops/s", "ratio", "Redis cores"]
REDIS_HEADER += ["conflicts", "commonest commands"]


@dataclass
class LearningResult:
    """Everything section 2 measured."""

    examples: int
    workers: list[WorkerRun] = field(default_factory=list)
    in_process: list[Measurement] = field(default_factory=list)
    ceiling: dict[str, float] = field(default_factory=dict)

    def river(self) -> float:
        return next(m.examples_per_second for m in self.in_process if m.system == "river")


def in_process(rows: list[Any], repeats: int) -> list[Measurement]:
    """Our replay at each batch size, River's ``learn_one``, VW's native learner on a file."""
    params, n = FTRLParams(), len(rows)
    warm = rows[: bench_replay.WARM_UP_EXAMPLES]
    jobs = [
        Job(
            Measurement("online-ctr", "replay", "ftrl", b, n),
            partial(bench_replay.run_ours, warm, "ftrl", b),
            partial(bench_replay.run_ours, rows, "ftrl", b),
        )
        for b in BATCH_SIZES
    ]
    jobs.append(
        Job(
            Measurement("river", "river", "ftrl", 1, n),
            partial(bench_replay.run_river, warm, params),
            partial(bench_replay.run_river, rows, params),
        )
    )
    with tempfile.TemporaryDirectory(prefix="octr-vw-") as folder:
        data, warm_data = Path(folder) / "rows.vw", Path(folder) / "warm.vw"
        encoder = _vw.TextEncoder()
        _vw.write_lines(data, (encoder.line(x, y) for x, y in rows))
        _vw.write_lines(warm_data, (encoder.line(x, y) for x, y in warm))
        jobs.append(
            Job(
                Measurement("vw", "pyvw-file", "ftrl", 1, n),
                partial(bench_replay.run_pyvw_file, warm_data, params, len(warm)),
                partial(bench_replay.run_pyvw_file, data, params, n),
            )
        )
        return bench_replay.measure_all(jobs, repeats, cheap_s=10.0)


def measure(data_dir: Path, examples: int, quick: bool) -> LearningResult:
    """Every learning figure of the section, in one run."""
    file_rows = feed.criteo_rows(data_dir)
    rows = bench_replay.replicate(file_rows, examples)
    result = LearningResult(examples=examples)
    result.in_process = in_process(rows, repeats=1 if quick else 3)
    blobs = feed.entries(file_rows)
    with scratch_dir("learning") as folder, Stack(Path(folder)) as stack:
        client = stack.client()
        result.ceiling = redis_ceiling.measure(
            client, stack.redis_server.port, 100_000 if quick else 500_000
        )
        client.close()
        for workers in WORKER_COUNTS:
            for batch in BATCH_SIZES:
                result.workers.append(run_workers(stack, blobs, examples, workers, batch))
    return result


def throughput_rows(result: LearningResult) -> list[list[Any]]:
    """One row per learner: examples/s, its ratio to River's, per CPU second, log loss."""
    river = result.river()
    rows: list[list[Any]] = [
        [
            f"{run.workers} worker{'s' if run.workers > 1 else ''} via Redis",
            run.batch_size,
            run.examples_per_second,
            run.examples_per_second / river,
            run.examples_per_cpu_second,
            f"{run.cores['workers']:.2f} + Redis {run.cores['redis']:.2f}",
            run.logloss,
        ]
        for run in result.workers
    ]
    rows += [
        [
            IN_PROCESS[m.system],
            m.batch_size,
            m.examples_per_second,
            m.examples_per_second / river,
            m.examples_per_cpu_second,
            f"{statistics.median(m.cpu_seconds) / statistics.median(m.seconds):.2f}",
            m.log_loss,
        ]
        for m in result.in_process
    ]
    return rows


def redis_rows(result: LearningResult) -> list[list[Any]]:
    """Per worker run: its Redis ops/s, the ceiling for its mix, the ratio, conflicts."""
    rows = []
    for run in result.workers:
        ceiling = run.ops_per_second / redis_ceiling.worker_ratio(
            run.calls, run.seconds, result.ceiling
        )
        top = sorted(run.calls.items(), key=lambda item: -item[1])[:3]
        mix = ", ".join(f"{name} {n / sum(run.calls.values()):.1%}" for name, n in top)
        ratio = run.ops_per_second / ceiling
        row = [run.workers, run.batch_size, run.ops_per_second, ceiling, ratio]
        rows.append([*row, run.cores["redis"], run.conflicts, mix])
    return rows


def verdict_ratio(result: LearningResult) -> float:
    """The target's ratio: one worker at the default batch size (512) over River."""
    default = next(r for r in result.workers if r.workers == 1 and r.batch_size == 512)
    return default.examples_per_second / result.river()


def render(result: LearningResult) -> str:
    """The section's Markdown: throughput table, Redis table, ceiling table, verdict."""
    ratio = verdict_ratio(result)
    ceiling: list[list[Cell]] = [[name.upper(), rps] for name, rps in result.ceiling.items()]
    return "\n\n".join(
        [
            f"{result.examples:,} examples (the Criteo head file repeated), FTRL with default "
            "hyper-parameters everywhere. Workers: single-example stream entries, "
            "pre-filled, timed from the first worker heartbeat until the step reaches "
            "the end. CPU is average cores used over the run (other engineers share the "
            "2 cores: ratios within this run are what counts).",
            table(THROUGHPUT_HEADER, throughput_rows(result)),
            "Redis operations of the workers (INFO commandstats, commands inside the Lua "
            "scripts counted) against Redis's ceiling for the same command mix "
            "(`redis-benchmark -P 16`, harmonic mean weighted by the mix):",
            table(REDIS_HEADER, redis_rows(result)),
            "`redis-benchmark -P 16 -c 50` on the same Redis, same run:",
            table(["command", "ops/s"], ceiling),
            "The log-loss column is progressive (each example scored before it is learned). "
            "A larger batch sums each feature's gradients over more examples before one update, "
            "so it learns differently (compare the log loss), which is why the target is judged "
            "at the default batch size. Conflicts are commits refused because another worker "
            "committed first (every commit moves the model-wide step): the batch is recomputed.",
            f"Target, worker >= {TARGET_OVER_RIVER:g}x River's `learn_one` (1 worker, batch "
            f"512): {ratio:.2f}x, {verdict(ratio >= TARGET_OVER_RIVER)}.",
        ]
    )


def run(options: BenchOptions) -> Section:
    """Section 2 for ``loadtests.bench``."""
    result = measure(options.data_dir, options.examples, options.quick)
    ratio = verdict_ratio(result)
    return Section(
        title="Learning throughput",
        markdown=render(result),
        summary={
            "worker_examples_per_second (1 worker, batch 512)": ratio * result.river(),
            "river_examples_per_second": result.river(),
            "worker_over_river": ratio,
            "target_worker_2x_river": verdict(ratio >= TARGET_OVER_RIVER),
        },
    )
