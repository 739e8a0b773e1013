"""Section 2, learning throughput: the replay command and one worker, next to Vowpal Wabbit
and River on the same rows (the runs are in :mod:`loadtests.bench.learning_runs`).

Every learner's progressive log loss is shown beside its speed; one no better than always
predicting the running mean is broken and is not compared (:mod:`loadtests.bench.baseline`). One
worker learns a model at a time; others stand by for failover, so one is measured.
"""

from __future__ import annotations

import math

from loadtests.bench import bench_replay
from loadtests.bench.learning_runs import NAMES, LearningResult, measure, ratio
from loadtests.common.report import BenchOptions, Cell, Headline, Section, Target, table, verdict

#: Issue 9: the replay at least half as fast as VW; issue 8: one worker's drain.
TARGET_OVER_VW = 0.5
TARGET_DRAIN_EXAMPLES_S = 150_000.0


def timed_rows(result: LearningResult) -> list[list[Cell]]:
    """One row per timed learner: examples/s, per CPU second, log loss, against the mean."""
    return [
        [
            NAMES[m.mode],
            m.examples_per_second,
            m.examples_per_cpu_second,
            len(m.seconds),
            m.log_loss,
            result.broken(m.log_loss) or "beats it",
        ]
        for m in result.timed
    ]


def drain_rows(result: LearningResult) -> list[list[Cell]]:
    """One row per drain: entry size, examples/s, per CPU second, cores, log loss."""
    return [
        [
            f"one `online-ctr worker`, entries of {run.per_entry:,}",
            run.examples_per_second,
            run.examples_per_cpu_second,
            f"{run.cores['worker']:.2f} + Redis {run.cores['redis']:.2f}",
            run.logloss,
            result.broken(run.logloss) or "beats it",
        ]
        for run in result.drains
    ]


def render(result: LearningResult) -> str:
    """The section's Markdown: the method, both tables, the verdicts."""
    replay, vw = result.of("replay"), result.of("vw-cli")
    over_vw = ratio(result, replay.examples_per_second, replay.log_loss, "vw-cli")
    drain = result.judged_drain()
    timed_header = ["learner", "examples/s", "examples/CPU-s", "runs", "log loss", "vs the mean"]
    drain_header = ["learner", "examples/s", "examples/CPU-s", "cores used", "log loss"]
    return "\n\n".join(
        [
            f"{result.examples:,} rows (the Criteo head file repeated), FTRL-Proximal at its "
            "default hyper-parameters everywhere, learned example by example in file order, "
            "each example scored before it is learned (progressive log loss). Always "
            f"predicting the running mean click rate scores {result.mean_logloss:.5f} on these "
            "rows; a learner no better than that is broken and is not compared. Whole "
            "processes are timed from start to exit, alternating, median of the runs; VW "
            f"(`{vw_program()}`: its own C++ reader and learner) reads its text format, written "
            "beforehand and not timed, with 32-bit feature hashing; River gets the rows "
            "already parsed. Examples per CPU second count the process and its children.",
            table(timed_header, timed_rows(result), digits=5),
            f"`online-ctr replay` over Vowpal Wabbit, same rows, whole processes: "
            f"{over_vw:.2f}x (target >= {TARGET_OVER_VW:g}x: "
            f"{_verdict(over_vw >= TARGET_OVER_VW, over_vw)}); log loss {replay.log_loss:.5f} "
            f"against VW's {vw.log_loss:.5f}.",
            "One worker learns a model at a time: it holds the model's lease, and any other "
            "worker stands by to take over within `OCTR_LEASE_TTL_MS` if it dies. Standbys "
            "buy failover, not throughput, so one worker is measured: the stream is filled "
            "before it starts (entries of 1 example, as single `/learn` requests write them, "
            "and of 1,000, as 1,000-example bodies do), timed from its first heartbeat until "
            "it has learned the last example, at default settings, in alternating rounds; "
            "the target judges the median drain of the largest entries. Its log loss is the "
            "replay's: the learning is the same, exact, example by example.",
            table(drain_header, [row[:5] for row in drain_rows(result)], digits=5),
            f"One worker's drain, entries of {drain.per_entry:,}, median of the rounds: "
            f"{drain.examples_per_second:,.0f} examples/s (target >= "
            f"{TARGET_DRAIN_EXAMPLES_S:,.0f}: "
            f"{_verdict(drain.examples_per_second >= TARGET_DRAIN_EXAMPLES_S, drain.logloss)}).",
        ]
    )


def vw_program() -> str:
    """How VW was run: its ``vw`` binary, or the pip package's command line.

    >>> vw_program() in ("vw", "python -m vowpalwabbit")
    True
    """
    return "vw" if len(bench_replay.vw_command()) == 1 else "python -m vowpalwabbit"


def _verdict(met: bool, figure: float | None) -> str:
    """The verdict, unless what it judges is not a number (a broken model's ratio)."""
    return "not judged: a model is broken" if figure is None or math.isnan(figure) else verdict(met)


def headlines(result: LearningResult) -> tuple[Headline, ...]:
    """Replay against VW (the target) and River; one worker's drain (issue 8's target)."""
    replay, vw, river = result.of("replay"), result.of("vw-cli"), result.of("river")
    drain = result.judged_drain()
    broken = result.broken(replay.log_loss)
    return (
        Headline(
            f"`online-ctr replay` of {result.examples:,} Criteo rows, exact, whole process",
            replay.examples_per_second,
            "examples/s",
            "Vowpal Wabbit's native `--ftrl`, same rows, whole process",
            vw.examples_per_second,
            Target(TARGET_OVER_VW, "ratio"),
            note=f"log loss {replay.log_loss:.5f}, VW's {vw.log_loss:.5f}",
            broken=broken or result.broken(vw.log_loss),
        ),
        Headline(
            f"`online-ctr replay` of {result.examples:,} Criteo rows, against River",
            replay.examples_per_second,
            "examples/s",
            "River's `FTRLProximal.learn_one`, in-process, rows parsed beforehand",
            river.examples_per_second,
            note=f"River's log loss {river.log_loss:.5f}",
            broken=broken or result.broken(river.log_loss),
        ),
        Headline(
            f"One worker draining a pre-filled stream, entries of {drain.per_entry:,} examples",
            drain.examples_per_second,
            "examples/s",
            "`online-ctr replay` of the same rows, whole process",
            replay.examples_per_second,
            Target(TARGET_DRAIN_EXAMPLES_S, "value"),
            note=f"log loss {drain.logloss or math.nan:.5f}",
            broken=result.broken(drain.logloss),
        ),
    )


def run(options: BenchOptions) -> Section:
    """Section 2 for ``loadtests.bench``."""
    result = measure(options.data_dir, options.examples, options.quick)
    return Section("Learning throughput", render(result), headlines=headlines(result))
