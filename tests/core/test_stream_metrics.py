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


@pytest.mark.parametrize("decimals", [1, 3, 17])
def test_auc_of_probabilities_equals_that_of_any_scores(decimals: int) -> None:
    """Probabilities sort as integer keys with their labels; other scores by an argsort. Times
    4 (exact in floating point: the same order and ties) takes the same data the other way."""
    rng = np.random.default_rng(decimals)
    p = np.round(rng.random(5_000), decimals)
    p[:50] = 0.0
    p[50:100] = -0.0  # equal to 0.0: tied with it
    y = (rng.random(len(p)) < p).astype(np.int64)
    y[:100] = np.arange(100) % 2
    assert auc(p, y) == auc(p * 4, y) == pytest.approx(roc_auc_score(y, p + 0.0), abs=1e-12)
    assert auc(np.append(p, np.inf), np.append(y, 1)) == auc(np.append(p, 1.0), np.append(y, 1))


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


def weighted_stream(seed: int, size: int) -> tuple[np.ndarray, ...]:
    p, y, losses = stream(seed, size)
    w = np.random.default_rng(seed + 100).uniform(0.2, 10.0, size)
    return p, y, losses, w


@pytest.mark.oracle
def test_weighted_batches_add_up_to_the_weighted_stream() -> None:
    p, y, losses, w = weighted_stream(seed=2, size=10_000)
    metrics = StreamMetrics()
    for start, stop in [(0, 1), (1, 700), (700, 3_001), (3_001, 10_000)]:
        metrics.add(p[start:stop], y[start:stop], losses[start:stop], w[start:stop])
    report = metrics.report()
    # Examples are counted, not weighed; the weights have a sum of their own.
    assert (report.count, report.positives) == (10_000, int(y.sum()))
    assert report.weight == metrics.weight == pytest.approx(w.sum(), rel=1e-12)
    assert report.logloss == pytest.approx(log_loss(y, p, sample_weight=w), rel=1e-12)
    assert report.calibration == pytest.approx((w * p).sum() / (w * y).sum(), rel=1e-12)
    assert report.auc == auc(p, y)  # unweighted, see the module's docstring


def test_a_weight_of_two_is_the_example_twice() -> None:
    p, y, losses = stream(seed=3, size=500)
    twice, doubled = StreamMetrics(), StreamMetrics()
    twice.add(np.repeat(p, 2), np.repeat(y, 2), np.repeat(losses, 2))
    doubled.add(p, y, losses, np.full(len(p), 2.0))
    assert doubled.weight == twice.count == 2 * doubled.count
    assert doubled.logloss == pytest.approx(twice.logloss, rel=1e-13)
    assert doubled.calibration == pytest.approx(twice.calibration, rel=1e-13)


def test_weights_of_one_and_no_weights_are_the_unweighted_sums_to_the_bit() -> None:
    """The unweighted figures are what they always were: loss and prediction sums added batch
    by batch, over the count and the positives; weights of 1 give the same bits."""
    p, y, losses = stream(seed=4, size=3_000)
    cuts = [(0, 1), (1, 1_000), (1_000, 3_000)]
    plain, ones = StreamMetrics(), StreamMetrics()
    loss_sum = p_sum = 0.0
    for start, stop in cuts:
        plain.add(p[start:stop], y[start:stop], losses[start:stop])
        ones.add(p[start:stop], y[start:stop], losses[start:stop], np.ones(stop - start))
        loss_sum += float(losses[start:stop].sum())
        p_sum += float(p[start:stop].sum())
    assert plain.logloss == loss_sum / 3_000
    assert plain.calibration == p_sum / int(y.sum())
    assert plain.report() == ones.report()
    assert plain.weight == 3_000.0


def test_uniformly_dropped_non_clicks_leave_the_auc_where_it_was() -> None:
    """AUC is P(score of a click > score of a non-click); keeping each non-click with
    probability 0.1 whatever its score keeps their distribution, so the AUC of the sample
    estimates the whole stream's. 30,000 clicks and 7,000 non-clicks kept: the sample AUC's
    standard error is 0.0025 here (Hanley and McNeil 1982); the bound is 6 of them (measured:
    0.7990 against 0.8035)."""
    rng = np.random.default_rng(5)
    y = (rng.random(100_000) < 0.3).astype(np.float64)
    p = 1.0 / (1.0 + np.exp(-(rng.normal(size=len(y)) + 1.2 * y - 1.0)))
    kept = (y == 1) | (rng.random(len(y)) < 0.1)
    full, sampled = auc(p, y), auc(p[kept], y[kept])
    assert 0.75 < full < 0.85
    assert abs(sampled - full) < 0.015


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1.0, 0.0], "finite and above 0"),
        ([1.0, -2.0], "finite and above 0"),
        ([np.nan, 1.0], "finite and above 0"),
        ([np.inf, 1.0], "finite and above 0"),
        ([1.0], "one weight per example"),
        ([[1.0, 1.0]], "one weight per example"),
    ],
)
def test_bad_weights_are_refused(weights: list[float], message: str) -> None:
    metrics = StreamMetrics()
    with pytest.raises(ValueError, match=message):
        metrics.add(np.array([0.5, 0.4]), np.array([1.0, 0.0]), np.array([0.7, 0.5]), weights)
    assert (metrics.count, metrics.weight) == (0, 0.0)
