"""The report's Markdown helpers and the driver's pieces: cells, tables, the machine
description parsers, sections that are missing or fail, and the assembled report.

No section is run for real here (``test_quality_parts.py`` runs quality's pieces).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# loadtests/ is not an installed package; pytest's `pythonpath = ["."]` would make this moot.
from loadtests.bench import run as bench
from loadtests.common.report import (
    BenchOptions,
    Headline,
    Section,
    Target,
    cell,
    figure,
    table,
    verdict,
)

ROOT = Path(__file__).resolve().parents[2]

CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
flags\t\t: fpu vme

processor\t: 1
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
"""


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "n/a"),
        (float("nan"), "n/a"),
        (float("inf"), "n/a"),
        (1234567, "1,234,567"),
        (0, "0"),
        (0.47079244, "0.4708"),
        (-5.57e-10, "-5.57e-10"),
        (12345.678, "12,346"),
        (True, "True"),
        ("met", "met"),
        ("a | b", "a \\| b"),
    ],
)
def test_cell(value: str | int | float | None, text: str) -> None:
    assert cell(value) == text


def test_cell_digits() -> None:
    assert cell(0.470788, digits=5) == "0.47079"
    assert cell(0.00012, digits=5) == "0.00012"


def test_table_right_aligns_numeric_columns_only() -> None:
    text = table(["rule", "log loss", "note"], [["ftrl", 0.5, "x"], ["rda", None, 3]])
    lines = text.splitlines()
    assert lines[0] == "| rule | log loss | note |"
    assert lines[1] == "|---|---:|---|"
    assert lines[3] == "| rda | n/a | 3 |"


def test_table_refuses_ragged_rows_and_allows_none() -> None:
    with pytest.raises(ValueError, match="3 cells"):
        table(["a", "b", "c"], [[1, 2]])
    assert table(["a"], []) == "| a |\n|---|"


def test_figure_links_relative_to_the_report(tmp_path: Path) -> None:
    image = tmp_path / "docs" / "img" / "frontier.png"
    assert figure(image, "Frontier", tmp_path / "docs") == "![Frontier](img/frontier.png)"


def test_verdict_words() -> None:
    assert [verdict(True), verdict(False), verdict(None)] == ["met", "NOT met", "not measured"]


def test_section_defaults_are_not_shared() -> None:
    a, b = Section("A", "text"), Section("B", "text")
    a.figures["x"] = Path("x.png")
    assert b.figures == {} and b.headlines == ()


def test_machine_parsers() -> None:
    assert bench.cpu_model(CPUINFO) == "Intel(R) Xeon(R) CPU @ 2.20GHz"
    assert bench.cpu_model("") == "unknown"
    assert bench.memory_gib("MemTotal:       24641536 kB\n") == pytest.approx(23.5, abs=0.01)
    assert bench.memory_gib("") is None


def test_machine_describes_cores_and_versions() -> None:
    about = bench.machine()
    assert about["cores"].isdigit()
    assert {"CPU", "memory", "Python", "numpy (Python)", "redis (Python)"} <= set(about)


def test_command_line_quotes_what_needs_it() -> None:
    assert bench.command_line([]) == "python -m loadtests.bench"
    assert bench.command_line(["--out", "my report.md"]) == (
        "python -m loadtests.bench --out 'my report.md'"
    )


def test_arguments(tmp_path: Path) -> None:
    args = bench.parse_args(["--quick", "--sections", "quality,memory"])
    assert args.quick and args.sections == ["quality", "memory"] and args.examples == 20_000
    assert bench.parse_args([]).examples == 200_000
    assert bench.parse_args([]).sections == list(bench.SECTIONS)
    with pytest.raises(SystemExit):
        bench.parse_args(["--sections", "quality,speed"])


def _options(tmp_path: Path) -> BenchOptions:
    return BenchOptions(True, 100, tmp_path, tmp_path / "img")


def test_a_missing_section_module_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> object:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr(bench.importlib, "import_module", missing)
    skipped = bench.load_section("freshness")
    assert skipped == bench.Skipped(
        "freshness", "`loadtests/bench/freshness.py` does not exist yet"
    )


def test_a_missing_package_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def run(options: BenchOptions) -> Section:
        raise ModuleNotFoundError("No module named 'river'", name="river")

    monkeypatch.setattr(bench, "load_section", lambda name: run)
    result = bench.run_section("learning", _options(tmp_path))
    assert isinstance(result, bench.Skipped)
    assert "`river`" in result.reason and "pip install -e '.[bench]'" in result.reason


def test_a_failing_section_does_not_stop_the_others(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(options: BenchOptions) -> Section:
        raise RuntimeError("wrk is not installed; sudo apt-get install -y wrk")

    monkeypatch.setattr(bench, "load_section", lambda name: run)
    result = bench.run_section("serving", _options(tmp_path))
    assert result == bench.Skipped(
        "serving", "failed: RuntimeError: wrk is not installed; sudo apt-get install -y wrk"
    )
    assert "Traceback" in capsys.readouterr().err


def test_preflight_names_the_package_of_a_missing_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench.shutil, "which", lambda program: None)
    problems = bench.preflight()
    assert "`wrk` is missing: `sudo apt-get update && sudo apt-get install -y wrk`" in problems
    assert any(p.endswith("install -y redis-server`") for p in problems)


def test_render_opens_with_headlines_and_ends_with_the_machine(tmp_path: Path) -> None:
    shown = tmp_path / "img" / "shown.png"
    extra = tmp_path / "img" / "extra.png"
    predict = Headline(
        "Single `/predict`", 7900.0, "requests/s", "a bare endpoint", 8500.0, Target(0.9, "ratio")
    )
    section = Section(
        "Serving",
        "| a |\n|---|\n\n![Frontier](img/shown.png)",
        figures={"frontier": shown, "extra plot": extra},
        headlines=(predict,),
    )
    skipped = bench.Skipped("memory", "`loadtests/bench/memory.py` does not exist yet")
    text = bench.render([section, skipped], {"date": "today", "CPU": "a CPU"}, tmp_path)
    assert text.startswith("# Benchmarks\n")
    table_line = (
        "| Single `/predict` | 7,900 requests/s | 0.93x a bare endpoint (8,500 requests/s) "
        "| >= 0.9x | met |"
    )
    assert table_line in text
    assert "- **memory**: `loadtests/bench/memory.py` does not exist yet" in text
    assert text.count("img/shown.png") == 1  # already in the section's text
    assert "![extra plot](img/extra.png)" in text  # appended
    # Headlines first, the section next, the machine last.
    assert text.index(table_line) < text.index("## Serving") < text.index("## This run")
    assert text.index("## This run") < text.index("| CPU | a CPU |")
    # No internal identifiers: every headline is in words.
    assert "_" not in text.split("## Serving")[0].replace("`loadtests/bench/memory.py`", "")


def test_main_writes_the_report_and_fails_if_a_section_did_not_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def load(name: str) -> object:
        if name == "quality":
            return lambda options: Section("Quality", f"ran with quick={options.quick}")
        return bench.Skipped(name, "not written")

    monkeypatch.setattr(bench, "load_section", load)
    monkeypatch.setattr(bench, "machine", lambda: {"CPU": "test"})
    out = tmp_path / "docs" / "benchmarks.md"
    status = bench.main(["--quick", "--sections", "quality,memory", "--out", str(out)])
    assert status == 1
    report = out.read_text()
    assert "ran with quick=True" in report and "- **memory**: not written" in report
    assert "--sections quality,memory" in report
    assert "ran with quick=True" in capsys.readouterr().out
