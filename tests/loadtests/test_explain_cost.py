"""The explain-cost command runs for real on a small size and prints its figures (no timings
are asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.bench import explain_cost
from loadtests.bench import run as bench
from loadtests.common.report import BenchOptions


def test_explain_cost_prints_the_three_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_cost.main(["--size", "500", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].strip() for line in lines[:3]] == list(explain_cost.SHAPES)
    assert lines[3].startswith("explain true / plain: ")


def test_the_bench_section_reports_each_shape_and_a_headline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The measurement itself runs for real above; here, the section built from its times.
    times = {"plain": [0.006, 0.007], "explain false": [0.035, 0.036], "explain true": [0.09]}
    monkeypatch.setattr(explain_cost, "measure", lambda data_dir, size, rounds: times)
    options = BenchOptions(quick=True, examples=1, data_dir=tmp_path, img_dir=tmp_path)
    section = explain_cost.run(options)
    assert section.title == "Explanations"
    assert "| explain true | 90.0 | 11,111 | 1 |" in section.markdown
    [headline] = section.headlines
    assert (headline.value, headline.baseline_value) == (pytest.approx(90.0), pytest.approx(35.5))
    assert "explain_cost" in bench.SECTIONS  # make bench runs it
