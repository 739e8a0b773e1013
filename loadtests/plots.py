"""The benchmarks' figures: curves over the stream, the sparsity-accuracy frontier, panels
of costs against model size, and cumulative distributions of latencies.

Each function draws one PNG with matplotlib's file-only backend and returns its path. Every
system keeps one colour in every figure, so the figures read together. Every figure goes
through :func:`loadtests.readable.save`, which refuses to write one whose panels lack a
title, axis labels with their units (in parentheses) or a legend: a figure nobody can read is
a bug.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests.readable import save

#: One colour per system, the same in every figure.
COLOURS = {
    "ftrl": "#d62728",
    "rda": "#1f77b4",
    "fobos": "#2ca02c",
    "tg": "#9467bd",
    "truncation": "#8c564b",
    "l1sgd": "#7f7f7f",
    "vw": "#ff7f0e",
    "river": "#17becf",
    "mean": "#000000",
}

#: Line styles of the reference systems and the baseline (ours are solid).
STYLES = {"vw": "--", "river": ":", "mean": "-."}


@dataclass(frozen=True)
class Curve:
    """One line: a label, x and y."""

    system: str
    label: str
    x: Sequence[float]
    y: Sequence[float]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _line(axis: Any, curve: Curve, **extra: Any) -> None:
    axis.plot(
        curve.x,
        curve.y,
        label=curve.label,
        color=COLOURS.get(curve.system, "black"),
        linestyle=STYLES.get(curve.system, "-"),
        linewidth=1.4,
        **extra,
    )


def loss_limits(curves: Sequence[Curve], skip_share: float = 0.05) -> tuple[float, float]:
    """Y limits that show the curves after their first few noisy points, with a margin.

    >>> loss_limits([Curve("a", "a", [1, 2, 3], [9.0, 0.5, 0.4])], skip_share=0.4)
    (0.39, 0.51)
    """
    tails = [y for c in curves for y in c.y[int(len(c.y) * skip_share) :]]
    low, high = min(tails), max(tails)
    margin = (high - low) * 0.1 or abs(high) * 0.01
    return round(low - margin, 10), round(high + margin, 10)


def stream_figure(
    path: Path, title: str, losses: Sequence[Curve], nonzeros: Sequence[Curve]
) -> Path:
    """Two panels over the stream: progressive log loss, then nonzero weights (log scale)."""
    plt = _pyplot()
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
    for curve in losses:
        _line(top, curve)
    top.set_ylim(*loss_limits(losses))
    top.set_ylabel("progressive log loss (mean so far, nats)")
    top.set_xlabel("stream position (examples learned)")
    top.set_title(title)
    top.legend(fontsize=8, ncol=2)
    for curve in nonzeros:
        _line(bottom, curve)
    bottom.set_yscale("log")
    bottom.set_ylabel("nonzero weights (count, log scale)")
    bottom.set_xlabel("stream position (examples learned)")
    bottom.set_title("Nonzero weights over the stream (the baseline has none)")
    bottom.legend(fontsize=8, ncol=2)
    for axis in (top, bottom):
        axis.grid(True, which="both", alpha=0.3)
    return _save(plt, figure, path)


def frontier_figure(
    path: Path,
    panels: Mapping[str, Sequence[Curve]],
    marks: Mapping[str, Sequence[Curve]] | None = None,
    lines: Mapping[str, tuple[str, float]] | None = None,
) -> Path:
    """One panel per dataset: final log loss against nonzero weights, one line per rule.

    ``marks`` are single points drawn as stars (VW, River: one setting each); ``lines`` a
    labelled horizontal line per dataset (the mean's log loss, the line to beat).
    """
    plt = _pyplot()
    figure, axes = plt.subplots(len(panels), 1, figsize=(9, 4.6 * len(panels)), squeeze=False)
    for axis, (dataset, curves) in zip(axes[:, 0], panels.items(), strict=True):
        for curve in curves:
            _line(axis, curve, marker="o", markersize=4)
        stars = (marks or {}).get(dataset, ())
        for mark in stars:
            colour = COLOURS.get(mark.system, "black")
            axis.plot(mark.x, mark.y, "*", color=colour, markersize=11, label=mark.label)
        losses = [y for c in [*curves, *stars] for y in c.y]
        if lines and dataset in lines:
            label, level = lines[dataset]
            axis.axhline(level, color=COLOURS["mean"], linestyle=STYLES["mean"], label=label)
            losses.append(level)
        if not [*curves, *stars]:
            axis.text(
                0.5,
                0.75,  # above the mean's line, which sits in the middle
                "every run is worse than the mean: nothing to rank",
                ha="center",
                transform=axis.transAxes,
            )
        low, high = frontier_limits(losses)
        axis.set_ylim(low, high)
        axis.set_xscale("log")
        axis.set_xlabel("nonzero weights at the end of the stream (count, log scale)")
        axis.set_ylabel("progressive log loss (nats)")
        axis.set_title(
            f"{dataset}: sparsity vs accuracy (lower left is better; runs worse than the "
            "mean left out)"
        )
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    return _save(plt, figure, path)


def frontier_limits(losses: Sequence[float], span: float = 0.12) -> tuple[float, float]:
    """Y limits from the best log loss to ``span`` (relative) above it, or the worst if lower.

    Sweeps end in runs far worse than the rest (too much l1); showing them all would flatten
    the region where the rules differ. The tables keep every number.

    >>> frontier_limits([0.5, 0.52, 0.9]), frontier_limits([0.4])
    ((0.4976, 0.5624), (0.38, 0.42))
    """
    best, worst = min(losses), max(losses)
    high = min(worst, best * (1 + span))
    margin = (high - best) * 0.04 or abs(best) * 0.05  # one level alone still gets a range
    return round(best - margin, 10), round(high + margin, 10)


@dataclass(frozen=True)
class Panel:
    """One panel of a figure of several: its curves, title and y-axis label (with units)."""

    title: str
    y_label: str
    curves: Sequence[Curve]
    log_y: bool = False


def panels_figure(path: Path, title: str, x_label: str, panels: Sequence[Panel]) -> Path:
    """Panels side by side in rows of two, sharing a log-scale x axis, each with a legend.

    Systems without a colour of their own take matplotlib's colour cycle.
    """
    plt = _pyplot()
    rows = -(-len(panels) // 2)
    figure, axes = plt.subplots(rows, 2, figsize=(11, 4.2 * rows), squeeze=False)
    for axis, panel in zip(axes.flat, panels, strict=False):
        for curve in panel.curves:
            axis.plot(
                curve.x,
                curve.y,
                label=curve.label,
                color=COLOURS.get(curve.system),
                linestyle=STYLES.get(curve.system, "-"),
                marker="o",
            )
        axis.set_xscale("log")
        if panel.log_y:
            axis.set_yscale("log")
        axis.set_title(panel.title, fontsize=10)
        axis.set_xlabel(x_label)
        axis.set_ylabel(panel.y_label)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    for axis in axes.flat[len(panels) :]:
        axis.set_visible(False)
    figure.suptitle(title)
    return _save(plt, figure, path)


def cdf_figure(
    path: Path, title: str, x_label: str, curve: Curve, target: tuple[str, float] | None = None
) -> Path:
    """The share of samples at or below each x (a step curve from 0), the target (label, x)
    as a vertical line; the x axis spans what there is to see: 0 to a little past the largest
    sample or the target."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4))
    ordered = sorted(curve.y)
    shares = [0.0] + [(i + 1) / len(ordered) for i in range(len(ordered))]
    axis.step([ordered[0], *ordered], shares, where="post", label=curve.label, linewidth=1.6)
    right = cdf_right_edge(ordered, None if target is None else target[1])
    if target is not None:
        label = target[0] if target[1] <= right else f"{target[0]} (off the chart, right)"
        axis.axvline(target[1], color="red", linestyle="--", label=label)
    axis.set_xlim(0, right)
    axis.set_ylim(0, 1.02)
    axis.set_title(title)
    axis.set_xlabel(x_label)
    axis.set_ylabel("share of samples (0 to 1)")
    axis.grid(True, alpha=0.3)
    axis.legend(loc="lower right")
    return _save(plt, figure, path)


def cdf_right_edge(samples: Sequence[float], target: float | None) -> float:
    """Where a distribution's x axis ends: just past its largest sample, or past the target
    when that is near (within twice the largest sample), so the curve always fills at least
    about half the chart however far below the target the samples are.

    >>> cdf_right_edge([40.0, 52.0], 100.0), cdf_right_edge([40.0, 460.0], 100.0)
    (108.0, 496.8)
    >>> cdf_right_edge([40.0, 50.0], 1000.0)  # the target is far off: the samples fill it
    54.0
    """
    largest = max(samples)
    near = target is not None and target <= 2 * largest
    return round(1.08 * max(largest, target if near and target is not None else 0.0), 10)


def _save(plt: Any, figure: Any, path: Path) -> Path:
    try:
        return save(figure, path)
    finally:
        plt.close(figure)
