"""Section 1, quality: does online-ctr learn as well as the tools people trust?

Per dataset: progressive log loss, AUC, calibration and nonzero weights of every rule at its
default setting, next to Vowpal Wabbit ``--ftrl`` and River ``FTRLProximal`` at FTRL's
hyper-parameters; curves over the stream; the l1 sweep of every rule as a sparsity-accuracy
frontier, and the seeds' claim tested on it (:mod:`loadtests.frontier`). The runs themselves
are in :mod:`loadtests.quality_runs`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from loadtests import claim, frontier, plots
from loadtests.quality_runs import (
    DATASETS,
    FTRL_SETTINGS,
    REFERENCES,
    SWEEPS,
    Outcome,
    describe,
    jobs_for,
    run_all,
)
from loadtests.report import BenchOptions, Section, figure, table, verdict

#: The issue's bound on |our FTRL's log loss - VW's| at the same settings.
VW_GAP_TARGET = 2e-4

NAMES = {
    "ftrl": "online-ctr FTRL-Proximal",
    "rda": "online-ctr L1-RDA",
    "fobos": "online-ctr L1-FOBOS",
    "tg": "online-ctr truncated gradient",
    "truncation": "online-ctr simple truncation",
    "l1sgd": "online-ctr L1-SGD",
    "vw": "Vowpal Wabbit --ftrl",
    "river": "River FTRLProximal",
}


def is_default(outcome: Outcome) -> bool:
    """Whether this run is the one the quality table shows (a reference, or a sweep's default)."""
    sweep = SWEEPS.get(outcome.job.system)
    return sweep is None or outcome.job.settings[sweep.knob] == sweep.default


def defaults(outcomes: Sequence[Outcome], dataset: str) -> list[Outcome]:
    """The table's runs for one dataset: FTRL, the references, then the other rules."""
    chosen = {o.job.system: o for o in outcomes if o.job.dataset == dataset and is_default(o)}
    order = ["ftrl", *REFERENCES, *(rule for rule in SWEEPS if rule != "ftrl")]
    return [chosen[name] for name in order if name in chosen]


def quality_table(rows: Sequence[Outcome]) -> str:
    header = ["system", "settings", "log loss", "AUC", "calibration", "nonzero weights", "tracked"]
    cells = [_quality_row(o) for o in rows]
    return table(header, cells, digits=5)


def _quality_row(o: Outcome) -> list[str | int | float | None]:
    system, settings = NAMES[o.job.system], describe(o.job.settings)
    return [system, settings, o.logloss, o.auc, o.calibration, o.nonzeros, o.tracked]


def vw_gap(rows: Sequence[Outcome]) -> float | None:
    """Our FTRL's log loss minus VW's, at the same settings and on the same examples."""
    by = {o.job.system: o for o in rows}
    if "ftrl" not in by or "vw" not in by:
        return None
    return by["ftrl"].logloss - by["vw"].logloss


def points(outcomes: Sequence[Outcome], dataset: str, rule: str) -> list[frontier.Point]:
    return [
        frontier.Point(o.nonzeros, o.logloss)
        for o in outcomes
        if o.job.dataset == dataset and o.job.system == rule
    ]


def sweeps_of(outcomes: Sequence[Outcome], dataset: str) -> dict[str, list[frontier.Point]]:
    return {rule: points(outcomes, dataset, rule) for rule in SWEEPS}


def l1sgd_shares(outcomes: Sequence[Outcome], dataset: str) -> list[float]:
    return [
        o.nonzeros / o.tracked
        for o in outcomes
        if o.job.dataset == dataset and o.job.system == "l1sgd" and o.tracked
    ]


def stream_plot(rows: Sequence[Outcome], dataset: str, img_dir: Path) -> Path:
    losses = [
        plots.Curve(o.job.system, NAMES[o.job.system], o.checkpoints, o.logloss_curve) for o in rows
    ]
    nonzeros = [
        plots.Curve(o.job.system, NAMES[o.job.system], o.checkpoints, o.nonzero_curve)
        for o in rows
        if o.nonzero_curve
    ]
    title = f"{dataset}: every rule at its default setting, batch size 1"
    return plots.stream_figure(img_dir / f"quality-{dataset}-stream.png", title, losses, nonzeros)


def frontier_plot(outcomes: Sequence[Outcome], img_dir: Path) -> Path:
    panels, marks = {}, {}
    for dataset in DATASETS:
        curves = []
        for rule, front in sweeps_of(outcomes, dataset).items():
            front = sorted(front, key=lambda p: p.nonzeros)
            x, y = [p.nonzeros for p in front], [p.logloss for p in front]
            curves.append(plots.Curve(rule, f"{rule} ({SWEEPS[rule].knob} swept)", x, y))
        panels[dataset] = curves
        marks[dataset] = [
            plots.Curve(o.job.system, NAMES[o.job.system], [o.nonzeros], [o.logloss])
            for o in outcomes
            if o.job.dataset == dataset and o.job.system in REFERENCES
        ]
    return plots.frontier_figure(img_dir / "quality-frontier.png", panels, marks)


def run(options: BenchOptions) -> Section:
    """Run every replay, draw the figures, and write the section."""
    jobs = jobs_for(options.data_dir, options.quick)
    outcomes = run_all(jobs, workers=max(1, min(2, os.cpu_count() or 1)))
    report_dir = options.img_dir.parent
    parts = [_method()]
    figures: dict[str, Path] = {}
    summary: dict[str, float | str] = {}
    for dataset in DATASETS:
        rows = defaults(outcomes, dataset)
        figures[f"{dataset}-stream"] = stream_plot(rows, dataset, options.img_dir)
        gap = vw_gap(rows)
        met = None if gap is None else abs(gap) <= VW_GAP_TARGET
        summary[f"{dataset}: FTRL log loss - VW's"] = "n/a" if gap is None else gap
        summary[f"{dataset}: VW gap within {VW_GAP_TARGET:g}"] = verdict(met)
        parts.append(_dataset_part(dataset, rows, gap, met, figures[f"{dataset}-stream"]))
    figures["frontier"] = frontier_plot(outcomes, options.img_dir)
    parts.append(figure(figures["frontier"], "Sparsity-accuracy frontier", report_dir))
    sweeps = {d: sweeps_of(outcomes, d) for d in DATASETS}
    verdicts = {d: frontier.verdict(sweeps[d], l1sgd_shares(outcomes, d)) for d in DATASETS}
    parts.append(claim.claim_section(verdicts, sweeps, outcomes))
    summary.update({f"{d}: seeds' claim": claim.word(v) for d, v in verdicts.items()})
    return Section("Quality", "\n\n".join(parts), figures, summary)


def _dataset_part(
    dataset: str, rows: Sequence[Outcome], gap: float | None, met: bool | None, plot: Path
) -> str:
    examples = rows[0].examples if rows else 0
    gap_text = "not measured" if gap is None else f"{gap:+.2e}"
    return "\n\n".join(
        [
            f"### {dataset} ({examples:,} examples, `{DATASETS[dataset][0]}`)",
            quality_table(rows),
            f"Our FTRL's log loss minus VW's at the same settings: **{gap_text}** "
            f"(target: within {VW_GAP_TARGET:g}; {verdict(met)}).",
            figure(
                plot, f"{dataset}: log loss and nonzero weights over the stream", plot.parents[1]
            ),
        ]
    )


def _method() -> str:
    sweep_rows = [
        [rule, s.knob, ", ".join(f"{v:g}" for v in s.values), f"{s.default:g}", describe(s.fixed)]
        for rule, s in SWEEPS.items()
    ]
    return "\n\n".join(
        [
            "Each data file is replayed once, in file order, at batch size 1 (every rule's exact "
            "sequential definition). Every example is scored before it is learned from "
            "(progressive validation), so the log loss, AUC and calibration (mean prediction "
            "over observed CTR) are the online ones. Nonzero weights are counted exactly at the "
            "end of the stream; *tracked* is how many features have state. "
            f"VW and River run at FTRL's setting ({describe(FTRL_SETTINGS)}); VW gets one index "
            "per feature name (no hash collisions), River's intercept goes through FTRL like "
            "our bias.",
            "Each rule's sparsity knob is swept with the rest fixed; the *default* is the run in "
            "the tables and the curves.",
            table(["rule", "knob", "swept values", "default", "fixed"], sweep_rows),
        ]
    )
