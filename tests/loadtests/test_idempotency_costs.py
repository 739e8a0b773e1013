"""The idempotency-costs command runs for real on a tiny size and prints its figures (no
timings or sizes are asserted)."""

from __future__ import annotations

import pytest

from loadtests.costs import idempotency_costs


def test_idempotency_costs_prints_memory_and_latency(capsys: pytest.CaptureFixture[str]) -> None:
    assert idempotency_costs.main(["--keys", "500", "--calls", "20", "--most", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "memory, 36-character keys",
        "memory, 255-character keys",
        "append, no key",
        "append, keyed",
        "append, keyed at the limit",
    ]
    assert all("per record with its index entry" in line for line in lines[:2])
