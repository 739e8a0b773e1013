"""The benchmark report: the section interface every section module implements, and Markdown.

Each section module (``loadtests.bench.quality``, ``learning``, ``serving``, ``freshness``,
``memory``) has ``run(options: BenchOptions) -> Section``. The driver (``loadtests.bench``)
prints each section's Markdown as it finishes and writes them all into ``docs/benchmarks.md``,
opening with every section's :class:`Headline` figures in one table
(:mod:`loadtests.bench.headline`).

>>> print(table(["rule", "log loss"], [["ftrl", 0.46321], ["rda", None]]))
| rule | log loss |
|---|---:|
| ftrl | 0.4632 |
| rda | n/a |
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Cell = str | int | float | None


@dataclass(frozen=True)
class BenchOptions:
    """What every section is told: how big a run, where the data is, where plots go.

    ``examples`` is the stream length for throughput sections (>= 200,000 in a full run,
    smaller with ``quick``); quality runs the data files themselves and ignores it.
    """

    quick: bool
    examples: int
    data_dir: Path
    img_dir: Path


@dataclass(frozen=True)
class Section:
    """One section of the report.

    ``markdown`` holds its tables and prose (no heading: the driver adds ``## title``),
    ``figures`` the PNGs it drew under ``docs/img`` by name, ``headlines`` the figures the
    report opens with, each next to its baseline from the same run and its target.
    """

    title: str
    markdown: str
    figures: dict[str, Path] = field(default_factory=dict)
    headlines: tuple[Headline, ...] = ()


@dataclass(frozen=True)
class Target:
    """What a headline figure must reach: a bound on the figure itself (``on="value"``), on
    its ratio to the baseline (``"ratio"``), or on its distance from it (``"gap"``, always an
    upper bound); ``at_most`` for bounds from above (latencies).

    >>> Target(0.9, "ratio").met(90.0, 100.0), Target(100, "value", at_most=True).met(120, None)
    (True, False)
    >>> Target(2e-4, "gap").met(0.4709, 0.4708), Target(0.5, "ratio").met(1.0, None)
    (True, None)
    """

    bound: float
    on: Literal["value", "ratio", "gap"]
    at_most: bool = False

    def measure(self, value: float, baseline: float | None) -> float | None:
        """The number the bound applies to; ``None`` if it needs a baseline there is not."""
        if self.on == "value":
            return value
        if baseline is None or not math.isfinite(baseline) or baseline == 0:
            return None
        return value / baseline if self.on == "ratio" else abs(value - baseline)

    def met(self, value: float, baseline: float | None) -> bool | None:
        measured = self.measure(value, baseline)
        if measured is None or not math.isfinite(measured):
            return None
        if self.at_most or self.on == "gap":
            return measured <= self.bound
        return measured >= self.bound


@dataclass(frozen=True)
class Headline:
    """One figure the report opens with, in plain words.

    ``what`` names it (``"Single /predict"``), ``value`` is ours in ``unit``; ``baseline``
    names what it is compared with, measured in the same run (``baseline_value``, same unit);
    ``target`` is the issue's. ``broken`` says why a figure must not be compared at all (a
    model worse than predicting the mean CTR): it then gets no ratio and no verdict.
    ``note`` adds a short clause (a log loss beside a throughput).
    """

    what: str
    value: float
    unit: str
    baseline: str = ""
    baseline_value: float | None = None
    target: Target | None = None
    note: str = ""
    broken: str = ""


def cell(value: Cell, digits: int = 4) -> str:
    """One table cell: ``n/a`` for missing or non-finite, thousands separators from 1,000 on.

    >>> [cell(None), cell(12345), cell(0.0000321), cell(2.5), cell(float("nan")), cell("x")]
    ['n/a', '12,345', '3.21e-05', '2.5000', 'n/a', 'x']
    >>> cell(-12345.6), cell(0.0)
    ('-12,346', '0.0000')
    >>> print(cell("a|b"))
    a\\|b
    """
    if value is None:
        return "n/a"
    if isinstance(value, bool | str):
        return str(value).replace("|", "\\|")  # a bare pipe would end the cell
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value != 0 and abs(value) < 10 ** -(digits - 1):
        return f"{value:.{digits - 1}g}"
    return f"{value:.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[Cell]], digits: int = 4) -> str:
    """A Markdown table; columns whose every value is a number are right-aligned."""
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row needs {len(header)} cells")
    numeric = [
        bool(rows) and all(isinstance(row[j], int | float) or row[j] is None for row in rows)
        for j in range(len(header))
    ]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if right else "---" for right in numeric) + "|",
    ]
    lines += ["| " + " | ".join(cell(value, digits) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def figure(path: Path, caption: str, relative_to: Path) -> str:
    """A Markdown image whose link works from the report's folder.

    >>> figure(Path("/r/docs/img/a.png"), "Log loss", Path("/r/docs"))
    '![Log loss](img/a.png)'
    """
    return f"![{caption}]({Path(os.path.relpath(path, relative_to)).as_posix()})"


def verdict(met: bool | None) -> str:
    """A target's verdict word.

    >>> verdict(True), verdict(False), verdict(None)
    ('met', 'NOT met', 'not measured')
    """
    if met is None:
        return "not measured"
    return "met" if met else "NOT met"
