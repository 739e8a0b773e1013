"""online-ctr's service next to Vowpal Wabbit's own server, ``vw --daemon``, on the same Criteo
rows: ``python -m loadtests.bench.vw_daemon`` (``make bench-vw-daemon``), and the section
``vw_daemon`` of ``make bench``.

    python -m loadtests.bench.vw_daemon                       # -> docs/benchmarks-vw-daemon.md
    python -m loadtests.bench.vw_daemon --rows 20000 --rounds 1 --out /tmp/vw-daemon.md

Each run starts one system fresh (:mod:`loadtests.bench.vw_daemon_systems`), and this process, the
load generator, drives it over one raw TCP connection:

1. learning: VW gets every labelled line at once (pipelined) and its answers are read until
   there is one per line; ours gets 1,000-example ``/learn`` bodies, one request at a time,
   then the model's ``global_step`` is polled until it covers them all. Timed from the first
   byte sent; the CPU seconds of each process over that window come from ``/proc/PID/stat``;
2. single predictions, one at a time: a VW line without its label (predicted, not learned)
   against a ``/predict`` body of one example; the rows' first ones, warmed up first. Ours
   are also timed against a bare FastAPI endpoint (:mod:`loadtests.common.bare_app`, the
   same bodies, the same client), started beside the service: a block of bare requests
   just before ours and one just after, so a drift in the machine's load falls on both;
3. batch predictions: 1,000 such lines sent at once against one ``/predict`` of 1,000.

The systems run A B B A in each round; per round each figure is the mean of a system's two
runs and the ratio ours/VW is taken; the table gives the medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np

from loadtests.bench import bench_replay
from loadtests.bench.run import command_line, machine
from loadtests.bench.vw_daemon_parts import (
    Row,
    Run,
    against_bare,
    compare,
    http_request,
    learn_bodies,
    learning_payload,
    order,
    predict_bodies,
    prediction_lines,
)
from loadtests.bench.vw_daemon_report import About, markdown, page, printed
from loadtests.bench.vw_daemon_systems import BareEndpoint, Service, VWDaemon
from loadtests.common import feed
from loadtests.common.report import BenchOptions, Headline, Section, Target
from loadtests.common.stats import cpu_seconds
from online_ctr.learning.learner import sigmoid
from online_ctr.learning.rules.ftrl import FTRLParams
from testkit.paths import DATA_DIR, ROOT

REPORT = ROOT / "docs" / "benchmarks-vw-daemon.md"
#: Examples per ``/learn`` body and per batch prediction.
BODY = 1000
#: Single predictions and batches a run: 1,000 single ones put the p99 on the 10th slowest,
#: and keep a whole run of 3 rounds within 5 minutes on a loaded 2-core machine.
SINGLE = 1000
BATCHES = 20
#: Issue 51's targets: learning through ``/learn`` at least 1.5x VW's daemon; one
#: ``/predict`` at most 1.5x a bare FastAPI endpoint's p50 and 2x its p99.
TARGET_LEARNING = 1.5
TARGET_BARE_P50 = 1.5
TARGET_BARE_P99 = 2.0


@dataclass(frozen=True)
class Workload:
    """What both systems are sent, built once before the first run."""

    rows: list[Row]
    vw_learn: bytes
    vw_single: list[bytes]
    vw_batches: list[bytes]
    learn: list[bytes]
    single: list[bytes]
    batches: list[bytes]
    warm_up: int


def workload(rows: list[Row], single: int, batches: int) -> Workload:
    """The rows as VW lines and as request bodies: all of them to learn, the first
    ``single`` to predict one at a time, ``batches`` batches of 1,000 to predict."""
    batch_rows = bench_replay.replicate(rows, batches * BODY)
    lines = prediction_lines(batch_rows)
    return Workload(
        rows,
        learning_payload(rows),
        prediction_lines(rows[:single]),
        [b"".join(lines[i : i + BODY]) for i in range(0, len(lines), BODY)],
        learn_bodies(rows, BODY),
        predict_bodies(rows[:single], 1),
        predict_bodies(batch_rows, BODY),
        warm_up=min(200, single),
    )


def timed(
    send: Callable[[bytes], object], items: Sequence[bytes], warm_up: int
) -> tuple[tuple[float, ...], float]:
    """Seconds of each ``send``, one after the other, after ``warm_up`` untimed ones; and
    the whole loop's seconds."""
    for item in items[:warm_up]:
        send(item)
    times = []
    loop = time.perf_counter()
    for item in items:
        started = time.perf_counter()
        send(item)
        times.append(time.perf_counter() - started)
    return tuple(times), time.perf_counter() - loop


def cpu_now(system: VWDaemon | Service) -> dict[str, float]:
    """CPU seconds so far of the system's processes, and of this one, the load generator
    (its own: the servers it started and waits for are counted as theirs)."""
    return {**system.cpu(), "load generator": cpu_seconds(os.getpid())}


def spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


def run_vw(folder: Path, work: Workload) -> Run:
    """One run of VW's daemon: learn every row, then the single and batch predictions."""
    n = len(work.rows)
    with VWDaemon(folder, FTRLParams()) as vw:
        before = cpu_now(vw)
        seconds, answers = vw.learn(work.vw_learn, n)
        cpu = spent(before, cpu_now(vw))
        single = timed(lambda line: vw.predict(line, 1), work.vw_single, work.warm_up)
        batch = timed(lambda lines: vw.predict(lines, BODY), work.vw_batches, 2)
    scores = np.array(answers.split(), dtype=np.float64)
    logloss = bench_replay.mean_log_loss(sigmoid(scores), work.rows)
    return Run("vw", n, seconds, *single, batch[0], BODY, logloss, cpu)


def run_ours(folder: Path, work: Workload) -> Run:
    """One run of ``online-ctr serve``: learn every row, then the single and batch predictions."""
    n = len(work.rows)
    # The bare app first: the service's connection must not idle while it starts.
    with BareEndpoint(folder) as bare, Service(folder) as service:
        learn = [http_request("/learn", body, service.key) for body in work.learn]
        single_requests = [http_request("/predict", b, service.key) for b in work.single]
        batch_requests = [http_request("/predict", b, service.key) for b in work.batches]
        before = cpu_now(service)
        seconds, answered = service.learn(learn, n)
        cpu = spent(before, cpu_now(service))
        if (step := service.status()["global_step"]) != n:
            raise RuntimeError(f"the model learned {step} examples, {n} were sent")
        logloss = service.logloss()
        ask = partial(service.exchange, expected=200)
        before = timed(bare.exchange, single_requests, work.warm_up)[0]
        bare.disconnect()  # a fresh connection after ours, as before it
        single = timed(ask, single_requests, work.warm_up)
        after = timed(bare.exchange, single_requests, work.warm_up)[0]
        batch = timed(ask, batch_requests, 2)
    return Run("ours", n, seconds, *single, batch[0], BODY, logloss, cpu, answered, before + after)


def measure(work: Workload, rounds: int) -> list[Run]:
    """Every run, A B B A per round, each printed as it ends."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="octr-vw-daemon-") as scratch:
        for index, system in enumerate(order(rounds)):
            folder = Path(scratch) / f"run{index}"
            folder.mkdir()
            run = (run_vw if system == "vw" else run_ours)(folder, work)
            runs.append(run)
            bare = f" (bare endpoint {run.bare_p50_ms:.3f} ms)" if run.bare_single_s else ""
            print(
                f"  {system:>4}: learned {run.learn_per_s:,.0f} examples/s, single p50 "
                f"{run.single_p50_ms:.3f} ms{bare}, batch p50 {run.batch_p50_ms:.1f} ms",
                file=sys.stderr,
                flush=True,
            )
    return runs


def load(data_dir: Path, rows: int, single: int, batches: int) -> Workload:
    """The Criteo head file repeated to ``rows`` rows, cut to whole ``/learn`` bodies."""
    count = rows - rows % BODY
    return workload(bench_replay.replicate(feed.criteo_rows(data_dir), count), single, batches)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench.vw_daemon", description=__doc__
    )
    parser.add_argument("--rows", type=int, default=200_000, help="Criteo rows to learn")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of A B B A")
    parser.add_argument("--single", type=int, default=SINGLE, help="single predictions a run")
    parser.add_argument("--batches", type=int, default=BATCHES, help="1,000-example batches a run")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--out", type=Path, default=REPORT, help="the Markdown page written")
    args = parser.parse_args(argv)
    if args.rows < BODY or args.rounds < 1 or args.single < 1 or args.batches < 1:
        parser.error(f"--rows must be >= {BODY}; --rounds, --single, --batches >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    work = load(args.data_dir, args.rows, args.single, args.batches)
    load_at_start, started = os.getloadavg()[0], time.perf_counter()
    about = machine()
    runs = measure(work, args.rounds)
    report = About(
        command=command_line(argv, "loadtests.bench.vw_daemon"),
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        rounds=args.rounds,
        load_average=(load_at_start, os.getloadavg()[0]),
        minutes=(time.perf_counter() - started) / 60,
        machine=f"{about['CPU']}, {about['cores']} cores, Python {about['Python']}, "
        f"vowpalwabbit {about['vowpalwabbit (Python)']}, "
        f"{about['redis-server'].split(' sha=')[0]}, code `{about['code']}`",
    )
    print(printed(runs))
    args.out.write_text(page(runs, report))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def run(options: BenchOptions) -> Section:
    """The section of ``loadtests.bench``: the same runs, 1 round if quick, else 3."""
    rounds = 1 if options.quick else 3
    work = load(options.data_dir, options.examples, SINGLE, BATCHES)
    runs = measure(work, rounds)
    learning, single = compare(runs)[:2]
    bare_p50, bare_p99 = against_bare(runs)
    headlines = (
        Headline(
            "Learning through `/learn` (1,000-example bodies) until all are learned",
            learning.ours,
            "examples/s",
            "Vowpal Wabbit's daemon (exact mode), same rows, lines pipelined",
            learning.vw,
            Target(TARGET_LEARNING, "ratio"),
        ),
        Headline(
            "One `/predict` at a time, p50, raw socket client",
            single.ours,
            "ms",
            "Vowpal Wabbit's daemon, one line at a time, same client",
            single.vw,
        ),
        Headline(
            "One `/predict` at a time, p50, raw socket client",
            bare_p50.ours,
            "ms",
            "a bare FastAPI endpoint that parses the same body, same client, same runs",
            bare_p50.vw,
            Target(TARGET_BARE_P50, "ratio", at_most=True),
        ),
        Headline(
            "One `/predict` at a time, p99, raw socket client",
            bare_p99.ours,
            "ms",
            "a bare FastAPI endpoint that parses the same body, same client, same runs",
            bare_p99.vw,
            Target(TARGET_BARE_P99, "ratio", at_most=True),
        ),
    )
    text = markdown(runs, command_line(["--sections", "vw_daemon"], "loadtests.bench"), rounds)
    return Section("Against Vowpal Wabbit's daemon", text, headlines=headlines)


if __name__ == "__main__":
    sys.exit(main())
