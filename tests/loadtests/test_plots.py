"""The benchmarks' figures read at a glance (issue 36): a panel per series where series run on
top of each other, legends outside the data, no empty panel, one unit per axis. Small inputs,
matplotlib's axes inspected; nothing timed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtests.bench import bench_scale, quality_data, quality_runs, replot, scale_report
from loadtests.common import plots, readable
from loadtests.common.report import Cell, table

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from matplotlib import pyplot as plt  # noqa: E402

X = [float(x) for x in range(100, 1100, 100)]
#: Four rules whose curves coincide, as FOBOS, TG, truncation and L1-SGD nearly do.
SAME = ("fobos", "tg", "truncation", "l1sgd")


def curve(system: str, shift: float = 0.0) -> plots.Curve:
    return plots.Curve(system, f"{system} label", X, [0.47 + 1 / x + shift for x in X])


@pytest.fixture
def close() -> Iterator[list[Any]]:
    """Figures the test made, closed after it."""
    made: list[Any] = []
    yield made
    for figure in made:
        plt.close(figure)


def visible(figure: Any) -> list[Any]:
    return [axis for axis in figure.axes if axis.get_visible()]


def own_line(axis: Any) -> Any:
    """The panel's own series: the one drawn on top, in colour."""
    return max(axis.get_lines(), key=lambda line: line.get_zorder())


def outside_every_panel(figure: Any, legend: Any) -> bool:
    figure.canvas.draw()
    box = legend.get_window_extent()
    return not any(box.overlaps(axis.get_window_extent()) for axis in visible(figure))


def test_every_system_of_the_stream_figure_gets_its_own_panel(close: list[Any]) -> None:
    losses = [
        curve("ftrl", 0.01),
        curve("vw", 0.01),
        *(curve(s) for s in SAME),
        curve("mean", 0.05),
    ]
    nonzeros = [
        plots.Curve(s, s, X, [x * (i + 1) for x in X]) for i, s in enumerate(("ftrl", *SAME))
    ]
    figure = plots.stream_drawing("criteo", losses, nonzeros)
    close.append(figure)
    panels = visible(figure)
    assert len(panels) == len(losses) + len(nonzeros)
    for axis, shown in zip(panels, [*losses, *nonzeros], strict=True):
        assert axis.get_title() == shown.label
        # Every series in the panel (the others in grey, for comparison), its own on top.
        assert len(axis.get_lines()) == len(losses if shown in losses else nonzeros)
        top = own_line(axis)
        assert top.get_color() == plots.COLOURS[shown.system]
        assert {line.get_color() for line in axis.get_lines() if line is not top} <= {plots.CONTEXT}
    assert [axis.get_yscale() for axis in panels[len(losses) :]] == ["log"] * len(nonzeros)
    # One legend for the figure, outside every panel.
    assert len(figure.legends) == 1 and outside_every_panel(figure, figure.legends[0])


def test_the_frontier_drops_a_dataset_without_runs_and_says_why(close: list[Any]) -> None:
    sweeps = {
        "criteo": [curve(rule) for rule in ("ftrl", "rda", *SAME)],
        "ipinyou": [],
    }
    marks = {"criteo": [plots.Curve("vw", "VW", [500], [0.472])]}
    lines = {"criteo": ("always predict the mean", 0.52), "ipinyou": ("the mean", 0.05)}
    figure = plots.frontier_drawing(sweeps, marks, lines)
    close.append(figure)
    panels = visible(figure)
    assert [axis.get_title() for axis in panels] == [c.label for c in sweeps["criteo"]]
    assert all(any(len(line.get_xdata()) for line in axis.get_lines()) for axis in panels)
    assert "ipinyou not shown: every run is worse" in figure.get_suptitle()
    # VW's mark is in FTRL's panel alone, open so that FTRL's point shows through it.
    with_marks = [a for a in panels if any(line.get_marker() == "*" for line in a.get_lines())]
    assert with_marks == panels[:1]
    star = next(line for line in panels[0].get_lines() if line.get_marker() == "*")
    assert star.get_markerfacecolor() == "none"
    legend = figure.legends[0]
    assert "always predict the mean" in [text.get_text() for text in legend.get_texts()]
    assert outside_every_panel(figure, legend)


def test_a_frontier_with_every_dataset_empty_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no dataset has a run"):
        plots.frontier_figure(tmp_path / "f.png", {"ipinyou": []})
    assert not (tmp_path / "f.png").exists()


def test_the_scale_figure_has_one_unit_per_axis_and_legends_below(
    tmp_path: Path, close: list[Any]
) -> None:
    rows = [
        {key: float(i + 1) for key in scale_report.COLUMNS.values()}
        | {"tracked": float(10**i * 1e5)}
        for i in range(3)
    ]
    panels = [
        plots.Panel(
            title, label, [plots.Curve(name, name, [1.0, 10.0], [1.0, 2.0]) for name in fields]
        )
        for title, label, _, fields in bench_scale.PANELS
    ]
    figure = plots.panels_drawing("Cost against model size", "size (features)", panels)
    close.append(figure)
    for axis in visible(figure):
        legend = axis.get_legend()
        figure.canvas.draw()
        assert not legend.get_window_extent().overlaps(axis.get_window_extent())
    # Each panel plots fields of one unit, which its y label names alone.
    units = {"features_per_s": "features", "examples_per_s": "examples"}
    for _, label, _, fields in bench_scale.PANELS:
        found = {
            unit for suffix, unit in units.items() for f in fields.values() if f.endswith(suffix)
        }
        assert len(found) <= 1, label
        assert " or " not in label and len(re.findall(r"\(", label)) == 1
    assert bench_scale.plot_rows(rows, "wrk", tmp_path / "scale.png").exists()


def test_a_legend_over_data_is_refused(tmp_path: Path, close: list[Any]) -> None:
    def attempt(where: str) -> Path:
        figure, axis = plt.subplots()
        close.append(figure)
        axis.plot([0, 1], [0, 1], label="rising")
        axis.plot([0, 1], [1, 1], label="flat at the top")
        axis.set(title="T", xlabel="time (s)", ylabel="latency (ms)")
        axis.legend(loc=where)  # type: ignore[call-overload]
        return readable.save(figure, tmp_path / f"{where}.png")

    with pytest.raises(readable.IncompleteFigure, match="covers data"):
        attempt("upper left")  # over the flat line
    assert attempt("lower right").exists()  # below the rising line: empty there


def test_a_panel_without_data_is_refused(tmp_path: Path, close: list[Any]) -> None:
    figure, (full, empty) = plt.subplots(1, 2, layout="constrained")
    close.append(figure)
    full.plot([0, 1], [0, 1], label="a curve")
    for axis in (full, empty):
        axis.set(title="T", xlabel="time (s)", ylabel="latency (ms)")
    figure.legend(loc="outside lower center")
    with pytest.raises(readable.IncompleteFigure, match="panel 2: needs data"):
        readable.save(figure, tmp_path / "f.png")


def test_replot_draws_every_figure_from_the_kept_data(tmp_path: Path) -> None:
    # Every run of a quick quality section, made up: each rule beats the mean on criteo
    # and avazu; on ipinyou none does (its frontier panel is dropped, as in the real data).
    outcomes = []
    for index, job in enumerate(quality_runs.jobs_for(tmp_path, quick=True)):
        mean = job.system == quality_runs.MEAN
        loss = 0.06 if job.dataset == "ipinyou" and not mean else 0.5 if mean else 0.45
        loss += 0.001 * (index % 7)  # the runs differ a little
        nonzero = () if job.system in (*quality_runs.REFERENCES, quality_runs.MEAN) else (5, 9)
        outcomes.append(
            quality_runs.Outcome(job, 200, loss, 0.7, 1.0, 9, 20, (100, 200), (0.6, loss), nonzero)
        )
    docs = tmp_path / "docs"
    quality_data.save(outcomes, docs / "img")
    rows: list[list[Cell]] = [[n, n + 2, *[i + 1.0] * 17] for i, n in enumerate((1_000, 10_000))]
    report = "## Figures at each size\n\n" + table(scale_report.HEADER, rows)
    (docs / "benchmarks-scale.md").write_text(report + "\n\n## Method\n")
    assert replot.main(["--docs", str(docs)]) == 0
    names = ["criteo-stream", "avazu-stream", "ipinyou-stream", "frontier"]
    for name in [*(f"quality-{n}" for n in names), "scale"]:
        assert (docs / "img" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
