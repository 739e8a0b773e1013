"""Speed of the sequential learner: the compiled kernel alone, and the whole replay command.

Run ``python -m loadtests.costs.bench_kernel [--examples 200000] [--rules all] [--repeats 3]``.

- kernel: the Criteo head, parsed and hashed once, repeated up to ``--examples`` and handed to
  :func:`online_ctr.learning.sequential.learn_sequential` as one batch. Timed: that call (the
  kernel,
  the copy of the state, the log losses and counts). Reported as feature-updates per CPU second
  (one update per stored (example, feature) pair) and examples per CPU second. Compilation (or
  loading it from numba's cache) happens in a warm-up call, not timed.
- replay: the whole ``online-ctr replay FILE --format criteo --rule RULE`` process at its
  default settings plus ``--replay-flags``, interpreter start-up included: examples per
  wall-clock second and per CPU second of the child. ``--source DIR`` runs it from another
  checkout (say, ``git archive`` of an older commit), for before/after figures.

The median of ``--repeats`` runs is reported; the last line is one JSON object. No test asserts
a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.bench.bench_replay import _rules
from online_ctr.learning.compact import ENCODINGS
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.learner import unique_features
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.sequential import learn_sequential
from testkit.paths import CRITEO, ROOT


def repeated(batch: Batch, examples: int) -> Batch:
    """``batch``'s examples in order, again and again, until there are ``examples`` of them."""
    copies = -(-examples // len(batch))
    pairs = batch.occurrences()
    every = [batch.indptr[:-1] + c * pairs for c in range(copies)] + [[pairs * copies]]
    indptr = np.concatenate(every)[: examples + 1].astype(np.int64)
    stop = int(indptr[-1])
    return Batch(
        indptr,
        np.tile(batch.ids, copies)[:stop],
        np.tile(batch.values, copies)[:stop],
        np.tile(batch.labels, copies)[:examples],
    )


def time_kernel(
    rule_name: str, batch: Batch, repeats: int, encoding: str = "float64"
) -> dict[str, Any]:
    """Median CPU and wall seconds of ``learn_sequential`` over the whole batch, from zeros."""
    rule = get_rule(rule_name)
    params, features = rule.params(), unique_features(batch)
    warm_up = repeated(batch, 100)  # compiles, or loads numba's cache
    warm = unique_features(warm_up)
    learn_sequential(rule, params, rule.zeros(len(warm.ids)), 0, warm_up, warm)
    cpu, wall = [], []
    for _ in range(repeats):
        state = rule.zeros(len(features.ids))
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        learned = learn_sequential(rule, params, state, 0, batch, features, encoding)
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started_wall)
    seconds = statistics.median(cpu)
    return {
        "rule": rule_name,
        "encoding": encoding,
        "examples": len(batch),
        "feature_updates": batch.occurrences(),
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "feature_updates_per_cpu_second": batch.occurrences() / seconds,
        "examples_per_cpu_second": len(batch) / seconds,
        "log_loss": float(learned.losses.mean()),
    }


def time_replay(rule: str, flags: Sequence[str], source: Path, repeats: int) -> dict[str, Any]:
    """Median wall and child-CPU seconds of the whole ``online-ctr replay`` process."""
    command = [sys.executable, "-m", "online_ctr.cli.main", "replay", str(CRITEO)]
    command += ["--format", "criteo", "--rule", rule, *flags]
    environment = {**os.environ, "PYTHONPATH": str(source)}
    subprocess.run(command, cwd=source, env=environment, capture_output=True, check=True)
    wall, cpu, output = [], [], {}
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(
            command, cwd=source, env=environment, capture_output=True, text=True, check=True
        )
        wall.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        output = json.loads(done.stdout.splitlines()[-1])
    examples = output["examples"]
    return {
        "rule": rule,
        "source": str(source),
        "flags": list(flags),
        "examples": examples,
        "wall_seconds": wall,
        "cpu_seconds": cpu,
        "process_examples_per_second": examples / statistics.median(wall),
        "process_examples_per_cpu_second": examples / statistics.median(cpu),
        "reported_examples_per_second": output["examples_per_second"],
        "log_loss": output["logloss"],
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.costs.bench_kernel", description=__doc__
    )
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--rules", type=_rules, default=sorted(RULES), help="all, or a list")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--encoding", choices=ENCODINGS, default="float64", help="the kernel's state encoding"
    )
    parser.add_argument("--skip", choices=("kernel", "replay"), help="measure only the other")
    parser.add_argument("--source", type=Path, default=ROOT, help="checkout to replay from")
    parser.add_argument("--replay-flags", default="", help='e.g. "--batch-size 512"')
    args = parser.parse_args(argv)
    if args.examples < 1 or args.repeats < 1:
        parser.error("--examples and --repeats must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    kernel, replays = [], []
    if args.skip != "kernel":
        rows = list(read_examples(CRITEO, "criteo"))
        head = FeatureHasher().batch([x for x, _ in rows], [y for _, y in rows])
        batch = repeated(head, args.examples)
        for rule in args.rules:
            kernel.append(time_kernel(rule, batch, args.repeats, args.encoding))
            m = kernel[-1]
            print(
                f"kernel {rule:<10} {m['feature_updates_per_cpu_second'] / 1e6:6.1f} M "
                f"feature-updates/CPU-s {m['examples_per_cpu_second']:>12,.0f} examples/CPU-s",
                flush=True,
            )
    if args.skip != "replay":
        for rule in args.rules:
            replays.append(time_replay(rule, args.replay_flags.split(), args.source, args.repeats))
            m = replays[-1]
            print(
                f"replay {rule:<10} {m['process_examples_per_second']:>8,.0f} examples/s whole "
                f"process ({m['process_examples_per_cpu_second']:,.0f}/CPU-s), "
                f"{m['reported_examples_per_second']:,.0f}/s as the command reports it",
                flush=True,
            )
    report = {"benchmark": "kernel", "load_average_1m": os.getloadavg()[0], "kernel": kernel}
    print(json.dumps({**report, "replay": replays}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
