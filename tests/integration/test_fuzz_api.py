"""Schemathesis, all checks, against the real API process on a real Redis: the bounded form of
``make fuzz-api`` (which runs over 2,000 cases)."""

from __future__ import annotations

import pytest

from loadtests.chaos import fuzz_api


@pytest.mark.timeout(180)
def test_every_generated_request_gets_a_documented_answer() -> None:
    result = fuzz_api.run(max_examples=20)
    assert result.exit_status == 0, result.output[-6000:]
    assert result.cases >= 200, result.output[-2000:]
    assert result.failing_cases == result.unique_failures == 0


def test_the_summary_is_parsed() -> None:
    output = "Test cases:\n  484 generated, 1 found 1 unique failure\n"
    assert fuzz_api.parse(output, 1).cases == 484
    assert fuzz_api.parse(output, 1).unique_failures == 1
    assert fuzz_api.parse("Test cases:\n  2364 generated, 2364 passed", 0).failing_cases == 0
