"""The join-costs command runs for real on a tiny size and prints its figures (no timings or
sizes are asserted)."""

from __future__ import annotations

import pytest

from loadtests.costs import join_costs


def test_join_costs_prints_memory_and_throughput(capsys: pytest.CaptureFixture[str]) -> None:
    assert join_costs.main(["--impressions", "2000", "--requests", "20", "--rounds", "1"]) == 0
    memory, predict = capsys.readouterr().out.splitlines()
    assert memory.startswith("memory: ") and "per tombstone" in memory
    assert predict.startswith("/predict: ") and "ratio" in predict
