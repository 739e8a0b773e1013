"""What ``online-ctr replay`` costs as a whole process, from start to exit, next to Vowpal
Wabbit's native ``--ftrl`` on the same rows: ``python -m loadtests.costs.replay_process``.

For each row count of ``--rows`` (the Criteo head file's rows, repeated as far as needed; one
row measures the start-up), each system runs as a fresh process, in rounds of A B C C B A:
this checkout's ``online-ctr replay FILE`` at its defaults; with ``--against DIR`` the same
command from another checkout (its code first on ``PYTHONPATH``), to measure a change; with
``--vw``, VW's native ``--ftrl`` at the same hyper-parameters reading the same rows in its text
format (written beforehand, not timed). Every system runs once untimed first, so that numba's
cache holds the checkouts' kernels; and each checkout's modules are compiled to bytecode first,
as an installed package has them (pip compiles them), even where ``PYTHONDONTWRITEBYTECODE``
is set (these machines set it: each run compiled ~40 modules from source, ~35 ms of CPU of a
one-row replay's ~0.35 s). Printed: per system the median wall and CPU seconds (user
and system, the process and its children) and the wall ratio to this checkout.

Prints Markdown tables; no targets asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadtests.bench import _vw, bench_replay
from loadtests.bench.learning_runs import write_rows
from loadtests.common import feed
from loadtests.common.stats import children_cpu_seconds
from online_ctr.learning.rules.ftrl import FTRLParams
from testkit.paths import DATA_DIR, ROOT

#: A command line, its environment and the folder it runs in.
Command = tuple[list[str], dict[str, str], Path]


def replay(checkout: Path, path: Path) -> Command:
    """``online-ctr replay PATH`` run from ``checkout`` (``python -m`` puts the working folder
    first on the path), its code also first on ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    return [sys.executable, "-m", "online_ctr.cli.main", "replay", str(path)], env, checkout


def compile_bytecode(checkout: Path) -> None:
    """The checkout's own modules compiled to bytecode (``__pycache__``, which git ignores)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
    command = [sys.executable, "-m", "compileall", "-q", "online_ctr"]
    subprocess.run(command, env=env, cwd=checkout, check=True, capture_output=True)


def vw(path: Path) -> Command:
    """VW's native ``--ftrl`` over its text file ``path``, quiet."""
    arguments = bench_replay.vw_arguments(FTRLParams(), quiet=True)
    return [*bench_replay.vw_command(), *arguments, f"--data={path}"], dict(os.environ), ROOT


def timed(command: Command) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command``, whose output is discarded."""
    cpu, started = children_cpu_seconds(), time.perf_counter()
    argv, env, folder = command
    subprocess.run(argv, env=env, cwd=folder, check=True, capture_output=True)
    return time.perf_counter() - started, children_cpu_seconds() - cpu


def systems(folder: Path, rows: int, args: argparse.Namespace) -> dict[str, Command]:
    """The commands to compare on ``rows`` rows, their files written into ``folder``."""
    data = write_rows(DATA_DIR / feed.CRITEO, folder / f"rows{rows}.tsv", rows)
    found = {"this checkout": replay(ROOT, data)}
    compile_bytecode(ROOT)
    if args.against is not None:
        found[f"`{args.against}`"] = replay(args.against.resolve(), data)
        compile_bytecode(args.against.resolve())
    if args.vw:
        text = folder / f"rows{rows}.vw"
        examples = bench_replay.replicate(feed.criteo_rows(DATA_DIR), rows)
        _vw.write_lines(text, _vw.TextEncoder().lines(examples))
        found["VW native `--ftrl`"] = vw(text)
    return found


def measure(commands: dict[str, Command], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Each command's runs, in rounds of A B C C B A after one untimed run each."""
    for command in commands.values():
        timed(command)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    order = list(commands)
    for _ in range(rounds):
        for name in order + order[::-1]:
            runs[name].append(timed(commands[name]))
    return runs


def table(rows: int, runs: dict[str, list[tuple[float, float]]]) -> str:
    """One Markdown table: each system's medians and its wall ratio to this checkout's."""
    wall = {name: statistics.median(w for w, _ in each) for name, each in runs.items()}
    ours = wall["this checkout"]
    lines = [
        f"{rows:,} rows, {len(runs['this checkout'])} runs each, load average "
        f"{os.getloadavg()[0]:.1f} at the end",
        "",
        "| system | wall s (median) | CPU s (median) | wall over this checkout's |",
        "|---|---:|---:|---:|",
    ]
    for name, each in runs.items():
        cpu = statistics.median(c for _, c in each)
        lines.append(f"| {name} | {wall[name]:.3f} | {cpu:.3f} | {wall[name] / ours:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,200000", help="row counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of A B C C B A")
    parser.add_argument("--against", type=Path, help="another checkout to compare")
    parser.add_argument("--vw", action="store_true", help="VW's native --ftrl beside")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="octr-replay-process-") as folder:
        for rows in (int(text) for text in args.rows.split(",")):
            runs = measure(systems(Path(folder), rows, args), args.rounds)
            print(table(rows, runs), end="\n\n", flush=True)


if __name__ == "__main__":
    main()
