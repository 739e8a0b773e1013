"""The kernel benchmark's pieces: repeating a batch, and one tiny real run (no timing asserted)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadtests.costs import bench_kernel
from online_ctr.learning.features import Example, FeatureHasher


def test_repeated_cycles_through_the_examples_in_order() -> None:
    examples: list[Example] = [{"site": "a"}, {"site": "b", "price": 2.0}, {"tags": ["x", "y"]}]
    batch = FeatureHasher().batch(examples, [1, 0, 1])
    longer = bench_kernel.repeated(batch, 7)
    assert len(longer) == 7
    assert longer.occurrences() == len(longer.ids) == len(longer.values)
    for j in range(7):
        k = j % 3
        got = slice(longer.indptr[j], longer.indptr[j + 1])
        want = slice(batch.indptr[k], batch.indptr[k + 1])
        np.testing.assert_array_equal(longer.ids[got], batch.ids[want])
        np.testing.assert_array_equal(longer.values[got], batch.values[want])
        assert longer.labels[j] == batch.labels[k]


def test_a_tiny_run_reports_kernel_and_replay(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--examples", "300", "--rules", "ftrl", "--repeats", "1", "--replay-flags"]
    assert bench_kernel.main([*argv, "--limit 40"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    (kernel,) = report["kernel"]
    assert (kernel["rule"], kernel["examples"]) == ("ftrl", 300)
    assert kernel["feature_updates"] > 300  # every example has the bias and more
    assert 0 < kernel["log_loss"] < 1
    (replay,) = report["replay"]
    assert (replay["examples"], replay["flags"]) == (40, ["--limit", "40"])
    assert 0 < replay["log_loss"] < 1
