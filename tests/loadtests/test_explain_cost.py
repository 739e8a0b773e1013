"""The explain-cost command runs for real on a small size and prints its figures (no timings
are asserted)."""

from __future__ import annotations

import pytest

from loadtests import explain_cost


@pytest.mark.integration
def test_explain_cost_prints_the_three_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_cost.main(["--size", "500", "--rounds", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].strip() for line in lines[:3]] == list(explain_cost.SHAPES)
    assert lines[3].startswith("explain true / plain: ")
