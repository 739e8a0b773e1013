"""What :mod:`loadtests.bench.vw_daemon` prints and writes: the comparison table (medians over the
rounds, ratio ours/VW per round), where the CPU went while each system learned, and the page
``docs/benchmarks-vw-daemon.md``.

>>> from loadtests.bench.vw_daemon_parts import Run, order
>>> runs = [
...     Run(s, 1000, t, (0.001, 0.002), 0.003, (0.01,), 1000, 0.5, {"X": t})
...     for s, t in zip(order(1), [1.0, 0.5, 0.5, 1.0])
... ]
>>> print(comparison_table(runs).splitlines()[2])
| learning, examples/s until all are learned | higher | 1,000 | 2,000 | 2.00x | 2.00x |
>>> print(cpu_table(runs).splitlines()[2])
| Vowpal Wabbit's daemon | X | 1.00 | 1,000 | 1.00 |
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from loadtests.bench.vw_daemon_parts import (
    Run,
    against_bare,
    compare,
    cpu_breakdown,
    figure_text,
    ratio_text,
)
from loadtests.bench.vw_daemon_systems import BITS
from loadtests.common.report import Cell, table

NAMES = {"vw": "Vowpal Wabbit's daemon", "ours": "online-ctr serve"}


@dataclass(frozen=True)
class About:
    """How and when the page's runs were made."""

    command: str
    date: str
    rounds: int
    load_average: tuple[float, float]
    minutes: float
    machine: str


def comparison_table(runs: Sequence[Run]) -> str:
    """Each figure: which way is better, both medians, the median ratio and each round's."""
    rows: list[list[Cell]] = [
        [
            c.label,
            c.better,
            figure_text(c.vw),
            figure_text(c.ours),
            ratio_text(c.ratio),
            ", ".join(ratio_text(r) for r in c.ratios),
        ]
        for c in compare(runs)
    ]
    header = ["figure", "better", "VW daemon", "online-ctr", "ours/VW", "each round"]
    return right_aligned(table(header, rows), {2, 3, 4})


def bare_table(runs: Sequence[Run]) -> str:
    """Ours against the bare endpoint timed in the same runs: both medians, the median ratio
    and each round's, and issue 51's bound on it."""
    bounds = {"p50": "<= 1.5x", "p99": "<= 2x"}
    rows: list[list[Cell]] = [
        [
            c.label,
            figure_text(c.vw),
            figure_text(c.ours),
            ratio_text(c.ratio),
            ", ".join(ratio_text(r) for r in c.ratios),
            bounds["p50" if "p50" in c.label else "p99"],
        ]
        for c in against_bare(runs)
    ]
    header = ["figure", "bare endpoint", "online-ctr", "ours/bare", "each round", "target"]
    return right_aligned(table(header, rows), {1, 2, 3})


def cpu_table(runs: Sequence[Run]) -> str:
    """Per system and process, the median CPU seconds while it learned the rows, per example,
    and as cores over the median learning time."""
    rows: list[list[Cell]] = []
    for system in ("vw", "ours"):
        mine = [run for run in runs if run.system == system]
        wall = statistics.median(run.learn_s for run in mine)
        examples = mine[0].examples
        for name, seconds in cpu_breakdown(runs, system).items():
            per_example = seconds / examples * 1e6
            figures = (seconds, per_example, seconds / wall)
            rows.append([NAMES[system], name, *(figure_text(x) for x in figures)])
    header = ["system", "process", "CPU s", "CPU µs per example", "cores while learning"]
    return right_aligned(table(header, rows), {2, 3, 4})


def right_aligned(markdown_table: str, columns: set[int]) -> str:
    """``markdown_table`` with these columns (from 0) right-aligned, figures printed as text.

    >>> print(right_aligned("| a | b |\\n|---|---|\\n| x | 1.0 |", {1}))
    | a | b |
    |---|---:|
    | x | 1.0 |
    """
    head, rule, *rows = markdown_table.split("\n")
    cells = ["---:" if j in columns else "---" for j in range(rule.count("|") - 1)]
    return "\n".join([head, "|" + "|".join(cells) + "|", *rows])


def learned(runs: Sequence[Run]) -> str:
    """How long each system took to learn the rows, and its progressive log loss on them."""
    parts = []
    for system in ("vw", "ours"):
        mine = [run for run in runs if run.system == system]
        seconds = statistics.median(run.learn_s for run in mine)
        losses = [run.logloss for run in mine if run.logloss is not None]
        loss = f"{statistics.median(losses):.5f}" if losses else "n/a"
        answered = [run.answered_s for run in mine if run.answered_s is not None]
        last = ""
        if answered:
            last = f" (the last `/learn` answered at {statistics.median(answered):.2f} s)"
        parts.append(f"{NAMES[system]} {seconds:.2f} s{last}, progressive log loss {loss}")
    return f"Learning the {runs[0].examples:,} rows (medians): " + "; ".join(parts) + "."


def method(rounds: int, examples: int) -> str:
    """What was run, and what each figure times."""
    return (
        f"Both systems learn the same {examples:,} Criteo rows (the head file of the shared "
        "data repeated, in file order) with the same features (a bias, `I{j}=bucket`, "
        "`C{j}=value`) and FTRL-Proximal at the service's default hyper-parameters "
        "(alpha 0.1, beta 1, L1 1, L2 1). Vowpal Wabbit runs as its own server: `python -m "
        "vowpalwabbit --daemon --foreground --port 0 --port_file F --num_children 1 --passes 1 "
        f"--ftrl ... --bit_precision={BITS}` (one child: its exact mode; its daemon refuses "
        "`--sparse_weights`, so its weights are dense at 24 bits). online-ctr runs as `make "
        "run` starts it: `online-ctr serve` at its defaults (an embedded Redis with its "
        "append-only file, the API, one worker, API keys on), whose defaults also add the "
        "base-rate prior to each logit. Each run starts its system fresh; one process, the "
        "load generator, drives it over one raw TCP connection, the same client for both "
        "(`TCP_NODELAY`, requests prebuilt, answers read with `recv`).\n\n"
        "- Learning: VW gets every labelled line at once (pipelined) and is timed until it "
        "has answered the last; online-ctr gets 1,000-example `/learn` bodies one request "
        "after the other, and is timed until the model's `global_step` covers them all.\n"
        "- One prediction at a time: a line without its label (VW predicts it and does not "
        "learn it) against a one-example `/predict`, on the model just learned; 200 untimed "
        "first. Requests/s is the count over the whole loop's time.\n"
        "- Batches: 1,000 such lines sent at once and their 1,000 answers read, against one "
        "`/predict` of 1,000 examples; 2 untimed first. Examples/s is every batch's examples "
        "over their summed times, so a slow batch counts in it as it does not in the p50.\n"
        "- Against a bare endpoint: beside each online-ctr run, the bare FastAPI app of "
        "`loadtests/common/bare_app.py` (it parses the same body into the same request model "
        "and answers a constant; the API's uvicorn settings) gets the same single "
        "predictions from the same client, one block (200 untimed first) just before "
        "online-ctr's and one just after; its p50 and p99 are over both blocks.\n\n"
        f"Each round ({rounds} in all) runs VW, online-ctr, online-ctr, VW (A B B A); per round "
        "each figure is the mean of a system's two runs, and ours/VW is taken from those. "
        "The table gives each system's median over the rounds and the median of the rounds' "
        "ratios. Where the CPU went while each system learned comes from `/proc/PID/stat` of "
        "each process over the learning window (the load generator is the benchmark's own "
        "process: for online-ctr it sends the prebuilt bodies and polls the step in Redis "
        "every 5 ms)."
    )


def markdown(runs: Sequence[Run], command: str, rounds: int) -> str:
    """The method, both tables and the learning times, with the command that made them."""
    return "\n\n".join(
        [
            method(rounds, runs[0].examples),
            comparison_table(runs),
            "One prediction at a time, against the bare endpoint timed in the same runs "
            "(per round the mean of online-ctr's two runs; the bound is issue 51's):",
            bare_table(runs),
            learned(runs),
            "Where the CPU went while each system learned the rows (medians over its runs):",
            cpu_table(runs),
            f"Made by `{command}`.",
        ]
    )


def page(runs: Sequence[Run], about: About) -> str:
    """``docs/benchmarks-vw-daemon.md``."""
    start, end = about.load_average
    return (
        "# Against Vowpal Wabbit's daemon\n\n"
        f"Written by `make bench-vw-daemon` (`{about.command}`) on {about.date}, in "
        f"{about.minutes:.1f} minutes; the machine's load average (1 minute) was "
        f"{start:.2f} at the start and {end:.2f} at the end, on {about.machine}. The question "
        "is issue 51's: what a user who switches from VW's own server to online-ctr pays or "
        "gains in speed. The other benchmarks: [Benchmarks](benchmarks.md).\n\n"
        + markdown(runs, about.command, about.rounds)
        + "\n"
    )


def printed(runs: Sequence[Run]) -> str:
    """The tables as the command prints them."""
    parts = [comparison_table(runs), bare_table(runs), learned(runs), cpu_table(runs)]
    return "\n\n".join(parts)
