"""The lean-costs command runs for real on a tiny model and prints its figures (no timings
are asserted)."""

from __future__ import annotations

import pytest

from loadtests.costs import lean_costs


def test_lean_costs_prints_both_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert lean_costs.main(["--features", "5000"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("model of 5,000 features:")
    assert "state bytes estimate" in line and "expired.lua over" in line
