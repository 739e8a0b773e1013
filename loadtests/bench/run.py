"""One command for every benchmark: ``python -m loadtests.bench`` (``make bench``).

Runs the sections in order (quality, quality_logs, learning, serving, freshness, memory,
explain_cost, vw_daemon: each a module of ``loadtests.bench`` with
``run(BenchOptions) -> Section``),
prints each one's tables as it ends, and writes the Markdown report: every section's headline
figures first, each next to its baseline from this run and its target, then the sections, then
the machine, the date and this exact command. With ``--update`` only the sections run are
rewritten in the report that is there, each saying when and how it was run alone; the rest
stays as it was. A section whose module is missing, or which lacks a tool, is named in the
report with what to install, and the others still run; the exit status is 1 if any section did
not run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from loadtests.bench import headline
from loadtests.common.report import BenchOptions, Section, figure, table
from testkit.paths import DATA_DIR, ROOT

SECTIONS = (
    "quality",
    "quality_logs",
    "learning",
    "serving",
    "freshness",
    "memory",
    "explain_cost",
    "vw_daemon",
)
PACKAGES = ("numpy", "redis", "river", "vowpalwabbit", "matplotlib")

#: Python packages of the ``bench`` extra: a section that imports a missing one says this.
EXTRA_HINT = "install the benchmark extra: `.venv/bin/pip install -e '.[bench]'`"
EXTRA_MODULES = ("river", "vowpalwabbit", "matplotlib", "locust", "httpx")
#: Programs some section runs, and the Debian package each comes from.
PROGRAMS = {"wrk": "wrk", "redis-server": "redis-server"}

Runner = Callable[[BenchOptions], Section]


@dataclass(frozen=True)
class Skipped:
    """A section that did not run, and why (with what to do about it)."""

    name: str
    reason: str


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small runs, for trying it out")
    parser.add_argument("--sections", type=_sections, default=list(SECTIONS))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--examples", type=int, help="stream length (200,000; 20,000 quick)")
    parser.add_argument(
        "--update",
        action="store_true",
        help="rewrite only the sections run in the report at --out, keeping its opening, its "
        "other sections and its machine table (a section without headline figures only)",
    )
    args = parser.parse_args(argv)
    if args.examples is None:
        args.examples = 20_000 if args.quick else 200_000
    return args


def _sections(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {', '.join(SECTIONS)}")
    return names


def load_section(name: str) -> Runner | Skipped:
    """The section's ``run``, or why it cannot run (module not written, extra not installed)."""
    try:
        module = importlib.import_module(f"loadtests.bench.{name}")
    except ModuleNotFoundError as error:
        if error.name == f"loadtests.bench.{name}":
            return Skipped(name, f"`loadtests/bench/{name}.py` does not exist yet")
        return Skipped(name, f"needs the Python package `{error.name}`: {EXTRA_HINT}")
    runner: Runner | None = getattr(module, "run", None)
    if runner is None:
        return Skipped(name, f"`loadtests/bench/{name}.py` has no `run(options)`")
    return runner


def run_section(name: str, options: BenchOptions) -> Section | Skipped:
    """Run one section; a missing tool or a failure becomes a :class:`Skipped` with the reason."""
    runner = load_section(name)
    if isinstance(runner, Skipped):
        return runner
    try:
        return runner(options)
    except ModuleNotFoundError as error:
        return Skipped(name, f"needs the Python package `{error.name}`: {EXTRA_HINT}")
    except Exception as error:  # one broken section must not lose the others' figures
        traceback.print_exc(file=sys.stderr)
        # MissingToolError's message says which Debian package to install.
        return Skipped(name, f"failed: {type(error).__name__}: {error}")


def preflight() -> list[str]:
    """What is missing, each with how to install it: said before any section spends time."""
    missing = [
        f"Python package `{module}` is missing: {EXTRA_HINT}"
        for module in EXTRA_MODULES
        if importlib.util.find_spec(module) is None
    ]
    missing += [
        f"`{program}` is missing: `sudo apt-get update && sudo apt-get install -y {package}`"
        for program, package in PROGRAMS.items()
        if shutil.which(program) is None
    ]
    return missing


def cpu_model(cpuinfo: str) -> str:
    """The ``model name`` of ``/proc/cpuinfo`` (its text), or ``unknown``.

    >>> cpu_model("processor\\t: 0\\nmodel name\\t: AMD EPYC 7B13\\n")
    'AMD EPYC 7B13'
    """
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return "unknown"


def memory_gib(meminfo: str) -> float | None:
    """``MemTotal`` of ``/proc/meminfo`` (its text) in GiB.

    >>> memory_gib("MemTotal:       16384000 kB\\nMemFree: 1 kB\\n")
    15.625
    """
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / 1024**2
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _output(command: Sequence[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return "not found"
    return done.stdout.strip() or "not found"


def machine() -> dict[str, str]:
    """Where the figures come from."""
    memory = memory_gib(_read("/proc/meminfo"))
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "not installed"
    return {
        "CPU": cpu_model(_read("/proc/cpuinfo")),
        "cores": str(os.cpu_count()),
        "memory": "unknown" if memory is None else f"{memory:.1f} GiB",
        "OS": platform.platform(),
        "Python": platform.python_version(),
        **{f"{package} (Python)": v for package, v in versions.items()},
        "redis-server": _output(["redis-server", "--version"]),
        "code": _output(["git", "describe", "--always", "--dirty"]),
    }


def command_line(argv: Sequence[str], module: str = "loadtests.bench") -> str:
    """This run's command, as someone would type it again.

    >>> command_line(["--quick", "--sections", "quality"])
    'python -m loadtests.bench --quick --sections quality'
    """
    return shlex.join(["python", "-m", module, *argv])


def section_markdown(section: Section, report_dir: Path) -> str:
    """A section under its heading, with any figure its text does not show yet appended."""
    parts = [f"## {section.title}", section.markdown]
    for name, path in section.figures.items():
        link = figure(path, name, report_dir)
        if link.split("(", 1)[1] not in section.markdown:
            parts.append(link)
    return "\n\n".join(parts)


def render(results: Sequence[Section | Skipped], about: dict[str, str], report_dir: Path) -> str:
    """The whole report: the headline figures in plain words, the sections, then the machine."""
    sections = [r for r in results if isinstance(r, Section)]
    skipped = [r for r in results if isinstance(r, Skipped)]
    headlines = [h for s in sections for h in s.headlines]
    header = [
        "# Benchmarks",
        "Generated by `make bench`; do not edit by hand.",
        headline.paragraph(headlines),
        headline.headline_table(headlines),
    ]
    if skipped:
        lines = "\n".join(f"- **{s.name}**: {s.reason}" for s in skipped)
        header.append(f"Sections that did not run:\n\n{lines}")
    body = [section_markdown(s, report_dir) for s in sections]
    machine_part = [
        "## This run",
        "Where these figures come from; the machine's load average says how much other work "
        "shared it.",
        table(["what", "this run"], list(about.items())),
    ]
    return "\n\n".join(header + body + machine_part) + "\n"


def splice(report: str, sections: Sequence[Section], report_dir: Path, note: str) -> str:
    """``report`` with each section in place of the one with its title (added before the
    machine table if there is none), followed by ``note``; the rest as it was.

    >>> old = "# B\\n\\n## Quality\\n\\nold\\n\\n## This run\\n\\nmachine\\n"
    >>> print(splice(old, [Section("Quality", "new")], Path("/r"), "run alone"))
    # B
    <BLANKLINE>
    ## Quality
    <BLANKLINE>
    new
    <BLANKLINE>
    run alone
    <BLANKLINE>
    ## This run
    <BLANKLINE>
    machine
    <BLANKLINE>
    """
    head, *blocks = re.split(r"(?m)^(?=## )", report)
    titles = [block.splitlines()[0].removeprefix("## ") for block in blocks]
    for section in sections:
        block = f"{section_markdown(section, report_dir)}\n\n{note}\n\n"
        if section.title in titles:
            blocks[titles.index(section.title)] = block
        else:
            at = titles.index("This run") if "This run" in titles else len(blocks)
            blocks.insert(at, block)
            titles.insert(at, section.title)
    return head + "".join(blocks)


def write_report(
    args: argparse.Namespace,
    results: Sequence[Section | Skipped],
    about: dict[str, str],
    report_dir: Path,
) -> None:
    """The whole report, or with ``--update`` the sections run spliced into the one there."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sections = [r for r in results if isinstance(r, Section)]
    if not (args.update and args.out.exists()):
        args.out.write_text(render(results, about, report_dir))
        return
    stale = [h.what for s in sections for h in s.headlines]
    if stale:  # the opening would no longer show what the section says
        raise SystemExit(f"bench: --update keeps the opening, which lacks {stale}: run them all")
    note = (
        f"*This section was run alone ({about['command']}, {about['date']}, code "
        f"`{about['code']}`, {about['duration']}); the machine table below is the last full "
        "run's.*"
    )
    args.out.write_text(splice(args.out.read_text(), sections, report_dir, note))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    report_dir = args.out.resolve().parent
    options = BenchOptions(args.quick, args.examples, args.data_dir, report_dir / "img")
    about = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    about["command"] = f"`{command_line(argv)}`"
    about.update(machine())
    about["load average at start (1 min)"] = f"{os.getloadavg()[0]:.2f}"
    for problem in preflight():
        print(f"bench: {problem}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    results: list[Section | Skipped] = []
    for name in args.sections:
        print(f"== {name} ...", file=sys.stderr, flush=True)
        results.append(run_section(name, options))
        result = results[-1]
        if isinstance(result, Section):
            print(section_markdown(result, report_dir) + "\n", flush=True)
        else:
            print(f"== {name} did not run: {result.reason}\n", flush=True)
    about["load average at end (1 min)"] = f"{os.getloadavg()[0]:.2f}"
    about["duration"] = f"{(time.perf_counter() - started) / 60:.1f} min"
    write_report(args, results, about, report_dir)
    print(f"report written to {args.out}", file=sys.stderr)
    return 1 if any(isinstance(r, Skipped) for r in results) else 0
