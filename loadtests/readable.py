"""A figure people can read: every panel has a title, axis labels with their units in
parentheses, and a legend. :func:`save` checks that before it writes a PNG, so no benchmark
can publish a figure without them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: A unit in an axis label: "latency (ms)", "nonzero weights (count, log scale)".
UNIT = re.compile(r"\(.+\)")

DPI = 110


class IncompleteFigure(ValueError):
    """A figure without a title, axis labels with units, or a legend on some panel."""


def missing_parts(axis: Any) -> list[str]:
    """What a visible panel lacks of a title, x and y labels with units, and a legend."""
    missing = [] if axis.get_title() else ["a title"]
    for name, label in (("x", axis.get_xlabel()), ("y", axis.get_ylabel())):
        if not UNIT.search(label):
            missing.append(f"a {name} label with its unit in parentheses (has {label!r})")
    legend = axis.get_legend()
    if legend is None or not legend.get_texts():
        missing.append("a legend")
    return missing


def save(figure: Any, path: Path) -> Path:
    """Write a figure as PNG, after checking every visible panel is readable on its own.

    :class:`IncompleteFigure` (and nothing written) if a panel lacks a title, axis labels
    with units or a legend.
    """
    for index, axis in enumerate(a for a in figure.axes if a.get_visible()):
        missing = missing_parts(axis)
        if missing:
            raise IncompleteFigure(f"{path.name}, panel {index + 1}: needs {', '.join(missing)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    return path
