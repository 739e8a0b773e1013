"""A figure people can read at a glance: every panel has a title, axis labels with their units
in parentheses, a legend (its own or the figure's) and some data, and no legend covers data.
:func:`save` checks that before it writes a PNG, so no benchmark can publish a figure without
them."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np

#: A unit in an axis label: "latency (ms)", "nonzero weights (count, log scale)".
UNIT = re.compile(r"\(.+\)")

DPI = 110

#: Points sampled along each segment of a line when looking for a legend over it: a legend
#: can sit between two far-apart points of a line and still cover it.
SAMPLES = 24


class IncompleteFigure(ValueError):
    """A figure without a title, axis labels with units, a legend or data on some panel, or
    with a legend over data."""


def missing_parts(axis: Any, figure_legend: bool = False) -> list[str]:
    """What a visible panel lacks of a title, x and y labels with units, a legend (its own,
    or ``figure_legend``: one for the whole figure) and data."""
    missing = [] if axis.get_title() else ["a title"]
    for name, label in (("x", axis.get_xlabel()), ("y", axis.get_ylabel())):
        if not UNIT.search(label):
            missing.append(f"a {name} label with its unit in parentheses (has {label!r})")
    legend = axis.get_legend()
    if not figure_legend and (legend is None or not legend.get_texts()):
        missing.append("a legend")
    if not any(len(line.get_xdata()) for line in axis.get_lines()):
        missing.append("data (drop a panel that has none, and say why)")
    return missing


def data_points(axis: Any) -> np.ndarray:
    """Display coordinates of every drawn line of a panel, sampled along each segment, that
    fall inside the panel (lines are clipped to it)."""
    box = axis.get_window_extent()
    found = [np.empty((0, 2))]
    for line in axis.get_lines():
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) > 1:
            steps = np.linspace(0.0, 1.0, SAMPLES, endpoint=False)[:, None, None]
            xy = np.concatenate([(xy[:-1] + steps * (xy[1:] - xy[:-1])).reshape(-1, 2), xy[-1:]])
        inside = (xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1)
        found.append(xy[inside & (xy[:, 1] >= box.y0) & (xy[:, 1] <= box.y1)])
    return np.concatenate(found)


def legends_over_data(figure: Any) -> list[str]:
    """The legends (by their first entry) that cover a point of some panel's lines."""
    figure.canvas.draw()
    axes = [a for a in figure.axes if a.get_visible()]
    legends = [*figure.legends, *(a.get_legend() for a in axes if a.get_legend())]
    points = np.concatenate([data_points(a) for a in axes]) if axes else np.empty((0, 2))
    covering = []
    for legend in legends:
        box = legend.get_window_extent()
        x, y = points[:, 0], points[:, 1]
        if ((x > box.x0) & (x < box.x1) & (y > box.y0) & (y < box.y1)).any():
            texts = legend.get_texts()
            covering.append(repr(texts[0].get_text() if texts else "an empty legend"))
    return covering


def save(figure: Any, path: Path) -> Path:
    """Write a figure as PNG, after checking every visible panel is readable on its own.

    :class:`IncompleteFigure` (and nothing written) if a panel lacks a title, axis labels
    with units, a legend or data, or a legend covers data.
    """
    for index, axis in enumerate(a for a in figure.axes if a.get_visible()):
        missing = missing_parts(axis, figure_legend=bool(figure.legends))
        if missing:
            raise IncompleteFigure(f"{path.name}, panel {index + 1}: needs {', '.join(missing)}")
    if figure.get_layout_engine() is None:
        figure.tight_layout()
    covering = legends_over_data(figure)
    if covering:
        raise IncompleteFigure(f"{path.name}: the legend of {', '.join(covering)} covers data")
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_png(figure, path)
    return path


def _write_png(figure: Any, path: Path) -> None:
    """The figure as a PNG of at most 256 colours: a plot has few, and the file is about
    2.5 times smaller than matplotlib's 24-bit one (a small-multiples figure: 530 KB to 130)."""
    from PIL import Image  # matplotlib's own dependency

    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=DPI, format="png")
    buffer.seek(0)
    with Image.open(buffer) as image:
        # Octree keeps each system's colour (within 2 of 255 per channel); the default median
        # cut merged River's cyan and VW's orange into their neighbours.
        few = image.convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE)
        few.save(path, "PNG", optimize=True)
