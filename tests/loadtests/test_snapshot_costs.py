"""The snapshot-costs command runs for real on a tiny size and prints its figures (no timings
are asserted)."""

from __future__ import annotations

import pytest

from loadtests.costs import snapshot_costs


def test_snapshot_costs_prints_each_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert snapshot_costs.main(["--sizes", "1000", "70000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "model of      1,000 features",
        "model of     70,000 features",
    ]
    assert all("import" in line and "export" in line and "peak" in line for line in lines)
