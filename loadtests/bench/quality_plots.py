"""The quality section's figures: each dataset's curves over the stream, and the
sparsity-accuracy frontier of every rule's sweep with the references and the mean beside."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from loadtests.bench import baseline, frontier
from loadtests.bench.quality_runs import MEAN, NAMES, REFERENCES, SWEEPS, Outcome
from loadtests.common import plots


def stream_plot(rows: Sequence[Outcome], dataset: str, img_dir: Path) -> Path:
    """Log loss (the mean's too) and nonzero weights over the stream, default settings."""
    losses = [
        plots.Curve(o.job.system, NAMES[o.job.system], o.checkpoints, o.logloss_curve) for o in rows
    ]
    nonzeros = [
        plots.Curve(o.job.system, NAMES[o.job.system], o.checkpoints, o.nonzero_curve)
        for o in rows
        if o.nonzero_curve and o.job.system != MEAN
    ]
    title = f"{dataset}: every rule at its default setting, batch size 1"
    return plots.stream_figure(img_dir / f"quality-{dataset}-stream.png", title, losses, nonzeros)


def frontier_plot(
    sweeps: Mapping[str, Mapping[str, Sequence[frontier.Point]]],
    outcomes: Sequence[Outcome],
    means: Mapping[str, float],
    img_dir: Path,
) -> Path:
    """One panel per dataset: each rule's unbroken sweep runs, VW and River as stars (unless
    broken), and the mean's log loss as a line (broken runs are left out: they sit above it)."""
    panels, marks = {}, {}
    for dataset, by_rule in sweeps.items():
        curves = []
        for rule, points in by_rule.items():
            front = sorted(points, key=lambda p: p.nonzeros)
            x, y = [p.nonzeros for p in front], [p.logloss for p in front]
            if front:
                curves.append(plots.Curve(rule, f"{rule} ({SWEEPS[rule].knob} swept)", x, y))
        panels[dataset] = curves
        marks[dataset] = [
            plots.Curve(o.job.system, NAMES[o.job.system], [o.nonzeros], [o.logloss])
            for o in outcomes
            if o.job.dataset == dataset
            and o.job.system in REFERENCES
            and not baseline.broken(o.logloss, o.nonzeros, means[dataset])
        ]
    lines = {dataset: (NAMES[MEAN], mean) for dataset, mean in means.items()}
    return plots.frontier_figure(img_dir / "quality-frontier.png", panels, marks, lines)
