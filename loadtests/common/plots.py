"""The benchmarks' figures: curves over the stream, the sparsity-accuracy frontier, panels
of costs against model size, and cumulative distributions of latencies.

Each function draws one PNG with matplotlib's file-only backend and returns its path. Every
system keeps one colour in every figure, so the figures read together. Every figure goes
through :func:`loadtests.common.readable.save`, which refuses to write one whose panels lack a
title, axis labels with their units (in parentheses) or a legend: a figure nobody can read is
a bug.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtests.common.readable import save

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


#: The colour of the other systems' curves drawn behind each small multiple's own.
CONTEXT = "#c8c8c8"


def _context_legend(figure: Any, columns: int = 2) -> None:
    """The figure's one legend, below its panels: what the coloured and the grey lines are."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color="black", linewidth=1.6),
        Line2D([], [], color=CONTEXT, linewidth=1.0),
    ]
    labels = [
        "the system named above the panel (its colour in every figure)",
        "every other system in the figure, for comparison",
    ]
    figure.legend(handles, labels, loc="outside lower center", ncol=columns, fontsize=9)


def _small_multiple(axis: Any, own: Curve, others: Sequence[Curve], **extra: Any) -> None:
    """One system's curve in its colour over every other system's in grey: each panel shows
    one series whole, however close the others run (several rules end within 1e-4 of each
    other, which one shared panel would draw as one line)."""
    for curve in others:
        if curve is not own:
            axis.plot(curve.x, curve.y, color=CONTEXT, linewidth=0.9, zorder=1, **extra)
    _line(axis, own, zorder=3, **extra)
    axis.set_title(own.label, fontsize=10)
    axis.grid(True, which="both", alpha=0.3)


def _grid(figure: Any, count: int, columns: int, **shared: Any) -> list[Any]:
    """``count`` panels in rows of ``columns``; the unused places of the last row hidden."""
    rows = -(-count // columns)
    axes = list(figure.subplots(rows, columns, squeeze=False, **shared).flat)
    for axis in axes[count:]:
        axis.set_visible(False)
    return axes[:count]


def stream_figure(
    path: Path, title: str, losses: Sequence[Curve], nonzeros: Sequence[Curve], columns: int = 3
) -> Path:
    """:func:`stream_drawing`, saved as a PNG."""
    return _save(_pyplot(), stream_drawing(title, losses, nonzeros, columns), path)


def stream_drawing(
    title: str, losses: Sequence[Curve], nonzeros: Sequence[Curve], columns: int = 3
) -> Any:
    """Small multiples over the stream, one panel per system: progressive log loss (every
    system and the baseline), then nonzero weights (log scale; the systems that count them
    along the stream)."""
    plt = _pyplot()
    rows = [-(-len(losses) // columns), -(-len(nonzeros) // columns)]
    figure = plt.figure(figsize=(4 * columns, 2.9 * sum(rows) + 1.2), layout="constrained")
    figure.suptitle(title)
    top, bottom = figure.subfigures(2, 1, height_ratios=rows) if nonzeros else (figure, None)
    top.suptitle("Progressive log loss over the stream (mean so far)", fontsize=11)
    low, high = loss_limits(losses)
    for axis, curve in zip(
        _grid(top, len(losses), columns, sharex=True, sharey=True), losses, strict=True
    ):
        _small_multiple(axis, curve, losses)
        axis.set_ylim(low, high)
        axis.set_xlabel("examples learned (count)")
        axis.set_ylabel("log loss (nats)")
    if bottom is not None:
        bottom.suptitle("Nonzero weights over the stream (log scale)", fontsize=11)
        grid = _grid(bottom, len(nonzeros), columns, sharex=True, sharey=True)
        for axis, curve in zip(grid, nonzeros, strict=True):
            _small_multiple(axis, curve, nonzeros)
            axis.set_yscale("log")
            axis.set_xlabel("examples learned (count)")
            axis.set_ylabel("nonzero weights (count)")
    _context_legend(figure)
    return figure


def frontier_figure(
    path: Path,
    panels: Mapping[str, Sequence[Curve]],
    marks: Mapping[str, Sequence[Curve]] | None = None,
    lines: Mapping[str, tuple[str, float]] | None = None,
    columns: int = 3,
) -> Path:
    """:func:`frontier_drawing`, saved as a PNG."""
    return _save(_pyplot(), frontier_drawing(panels, marks, lines, columns), path)


def frontier_drawing(
    panels: Mapping[str, Sequence[Curve]],
    marks: Mapping[str, Sequence[Curve]] | None = None,
    lines: Mapping[str, tuple[str, float]] | None = None,
    columns: int = 3,
) -> Any:
    """Small multiples of the sparsity-accuracy frontier: per dataset, one panel per rule
    (its sweep in colour over the other rules' in grey), final log loss against nonzero
    weights.

    ``marks`` are single points (VW, River: one setting each, FTRL's), drawn as open markers
    in the panel of the first curve, FTRL's, so its point shows through them; ``lines`` a
    labelled horizontal line per dataset (the mean's log loss, the line to beat). A dataset
    without a curve gets no panels: the figure's title says why.
    """
    plt = _pyplot()
    shown = {dataset: curves for dataset, curves in panels.items() if curves}
    dropped = [dataset for dataset in panels if dataset not in shown]
    if not shown:
        raise ValueError(f"no dataset has a run to draw: {', '.join(panels)}")
    rows = [-(-len(curves) // columns) for curves in shown.values()]
    figure = plt.figure(figsize=(4 * columns, 3.1 * sum(rows) + 1.6), layout="constrained")
    title = "Sparsity vs accuracy: each rule's sweep (lower left is better; runs worse than "
    title += "the mean left out)"
    if dropped:
        title += f"\n{', '.join(dropped)} not shown: every run is worse than always predicting "
        title += "the mean CTR (the tables list them)"
    figure.suptitle(title)
    parts = figure.subfigures(len(shown), 1, height_ratios=rows, squeeze=False)[:, 0]
    for part, (dataset, curves) in zip(parts, shown.items(), strict=True):
        part.suptitle(dataset, fontsize=11, fontweight="bold")
        stars = (marks or {}).get(dataset, ())
        level = (lines or {}).get(dataset)
        losses = [y for c in [*curves, *stars] for y in c.y] + ([level[1]] if level else [])
        low, high = frontier_limits(losses)
        grid = _grid(part, len(curves), columns, sharex=True, sharey=True)
        for index, (axis, curve) in enumerate(zip(grid, curves, strict=True)):
            _small_multiple(axis, curve, curves, marker="o", markersize=3.5)
            if index == 0:
                for mark in stars:
                    axis.plot(mark.x, mark.y, zorder=4, **_mark_style(mark.system))
            if level:
                axis.axhline(level[1], color=COLOURS["mean"], linestyle=STYLES["mean"], zorder=2)
            axis.set_ylim(low, high)
            axis.set_xscale("log")
            axis.set_xlabel("nonzero weights at the end (count, log scale)")
            axis.set_ylabel("log loss (nats)")
    stars = [m for marks_of in (marks or {}).values() for m in marks_of]
    mean = next(iter(lines.values()))[0] if lines else None
    _frontier_legend(figure, mean, {m.system: m.label for m in stars})
    return figure


#: Open markers of the single-setting systems, so the point under them shows through.
MARKS = {"vw": "*", "river": "D"}


def _mark_style(system: str) -> dict[str, Any]:
    return {
        "marker": MARKS.get(system, "^"),
        "linestyle": "none",
        "markerfacecolor": "none",
        "markeredgecolor": COLOURS.get(system, "black"),
        "markersize": 13 if MARKS.get(system) == "*" else 9,
        "markeredgewidth": 1.5,
    }


def _frontier_legend(figure: Any, mean: str | None, marks: Mapping[str, str]) -> None:
    """The figure's one legend, below its panels: the coloured rule, the grey ones, the
    mean's line and the single-setting systems' marks."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color="black", linewidth=1.6, marker="o", markersize=3.5),
        Line2D([], [], color=CONTEXT, linewidth=1.0, marker="o", markersize=3.5),
    ]
    labels = ["the rule named above the panel, a point per swept value", "every other rule"]
    if mean:
        handles.append(Line2D([], [], color=COLOURS["mean"], linestyle="-."))
        labels.append(mean)
    for system, label in marks.items():
        handles.append(Line2D([], [], **_mark_style(system)))
        labels.append(f"{label} (FTRL's settings; in FTRL's panel)")
    figure.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=9)


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
    """:func:`panels_drawing`, saved as a PNG."""
    return _save(_pyplot(), panels_drawing(title, x_label, panels), path)


def panels_drawing(title: str, x_label: str, panels: Sequence[Panel]) -> Any:
    """Panels side by side in rows of two, each with a log-scale x axis and a legend below it.

    Systems without a colour of their own take matplotlib's colour cycle.
    """
    plt = _pyplot()
    rows = -(-len(panels) // 2)
    figure, axes = plt.subplots(rows, 2, figsize=(11, 4.9 * rows), squeeze=False)
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
        # Below the panel, outside its data: a legend inside covered curves where they ran.
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    for axis in axes.flat[len(panels) :]:
        axis.set_visible(False)
    figure.suptitle(title)
    return figure


def cdf_figure(
    path: Path, title: str, x_label: str, curve: Curve, target: tuple[str, float] | None = None
) -> Path:
    """The share of samples at or below each x (a step curve from 0), the target (label, x)
    as a vertical line; the x axis spans what there is to see: 0 to a little past the largest
    sample or the target."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.6))
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
    # Below the chart: inside, the target's line can run under it.
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2, fontsize=9)
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
