"""Progressive-validation metrics against scikit-learn and one-shot numpy."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from online_ctr.learning.stream_metrics import StreamMetrics, auc


@pytest.mark.oracle
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("decimals", [1, 3, 17])
def test_auc_equals_scikit_learn_with_and_without_ties(seed: int, decimals: int) -> None:
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(5_000), decimals)  # 1 decimal: eleven values, ties everywhere
    y = (rng.random(len(p)) < p).astype(np.int64)
    assert auc(p, y) == pytest.approx(roc_auc_score(y, p), abs=1e-12)


def test_auc_of_extremes() -> None:
    assert auc([0.1, 0.2, 0.9], [0, 1, 1]) == 1.0
    assert auc([0.9, 0.2, 0.1], [0, 1, 1]) == 0.0
    assert auc([0.4] * 4, [0, 1, 0, 1]) == 0.5


def stream(seed: int, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 0.99, size)
    y = (rng.random(size) < 0.3).astype(np.float64)
    losses = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    return p, y, losses


@pytest.mark.oracle
def test_batches_add_up_to_the_whole_stream() -> None:
    p, y, losses = stream(seed=1, size=10_000)  # past the initial buffer: it must grow
    metrics = StreamMetrics()
    for start, stop in [(0, 1), (1, 700), (700, 3_001), (3_001, 10_000)]:
        metrics.add(p[start:stop], y[start:stop], losses[start:stop])
    report = metrics.report()
    assert report.count == 10_000
    assert report.positives == int(y.sum())
    assert report.logloss == pytest.approx(log_loss(y, p), rel=1e-12)
    assert report.auc == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert report.calibration == pytest.approx(p.mean() / y.mean(), rel=1e-12)


def test_undefined_metrics_are_none() -> None:
    empty = StreamMetrics().report()
    assert (empty.count, empty.logloss, empty.auc, empty.calibration) == (0, None, None, None)
    negatives_only = StreamMetrics()
    negatives_only.add(np.array([0.2, 0.3]), np.array([0, 0]), np.array([0.22, 0.36]))
    report = negatives_only.report()
    assert report.logloss == pytest.approx(0.29)
    assert (report.auc, report.calibration) == (None, None)


def test_bad_batches_are_refused() -> None:
    metrics = StreamMetrics()
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        metrics.add(np.array([0.5]), np.array([2.0]), np.array([0.7]))
    with pytest.raises(ValueError, match="one length"):
        metrics.add(np.array([0.5, 0.5]), np.array([1.0]), np.array([0.7]))
    assert metrics.count == 0
