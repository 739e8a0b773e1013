"""The online power calibration: its histogram is the same at any grouping, its fit is the
penalized Poisson maximum (checked against scipy on the same bins and against the truth on
data drawn from a known ``gamma p^kappa``), and the in-process model keeps it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize

from online_ctr.learning.calibration import (
    BINS,
    HIGH,
    LOW,
    PRIOR,
    WIDTH,
    Calibrator,
    Histogram,
    PowerFit,
)
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule
from testkit.paths import CRITEO


def draws(n: int, gamma: float, kappa: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Raw predictions spread over 0.01-0.6 and labels clicked with probability gamma p^kappa."""
    rng = np.random.default_rng(seed)
    p = np.exp(rng.uniform(math.log(0.01), math.log(0.6), n))
    y = (rng.random(n) < gamma * p**kappa).astype(np.float64)
    return p, y


def test_the_histogram_is_the_same_however_the_stream_is_grouped() -> None:
    p, y = draws(3000, 0.8, 1.2)
    whole = Histogram.empty().add(p, y)
    one_by_one = Histogram.empty()
    for j in range(len(p)):
        one_by_one = one_by_one.add(p[j : j + 1], y[j : j + 1])
    groups = Histogram.empty()
    for start, end in [(0, 7), (7, 1000), (1000, 1001), (1001, 3000)]:
        groups = groups.add(p[start:end], y[start:end])
    for other in (one_by_one, groups):
        assert other.sums.tobytes() == whole.sums.tobytes()  # bit for bit
    assert whole.sums[0].sum() == 3000 and whole.sums[1].sum() == y.sum()


def test_bins_cover_log_p_down_to_the_logit_clip() -> None:
    histogram = Histogram.empty().add(np.array([HIGH, 0.5, LOW]), np.zeros(3))
    counts = histogram.sums[0]
    assert counts[0] == 1 and counts[int(math.log(2) / WIDTH)] == 1 and counts[BINS - 1] == 1


@pytest.mark.parametrize(("gamma", "kappa"), [(1.0, 1.0), (0.5, 1.0), (1.3, 1.2), (0.9, 0.7)])
def test_the_fit_recovers_a_known_power_law(gamma: float, kappa: float) -> None:
    p, y = draws(200_000, gamma, kappa, seed=1)
    fit = Histogram.empty().add(p, y).fit()
    # With ~35k clicks a Poisson fit's standard errors are ~0.01 on kappa and ~0.02 on
    # log gamma here; 4 of them, plus the bins' (kappa * WIDTH)^2 / 24 < 1e-4 bias.
    assert fit.kappa == pytest.approx(kappa, abs=0.04)
    assert fit.log_gamma == pytest.approx(math.log(gamma), abs=0.08)


def test_the_fit_is_the_maximum_scipy_finds_on_the_same_bins() -> None:
    p, y = draws(5000, 0.7, 1.1, seed=2)
    histogram = Histogram.empty().add(p, y)
    count, clicks, sum_log = (row[histogram.sums[0] > 0] for row in histogram.sums)
    centre = sum_log.sum() / count.sum()
    x = sum_log / count

    def negative(theta: np.ndarray) -> float:
        eta = theta[0] + theta[1] * x
        ridge = 0.5 * PRIOR * ((theta[0] + theta[1] * centre - centre) ** 2 + (theta[1] - 1) ** 2)
        return float(-(clicks * eta - count * np.exp(eta)).sum() + ridge)

    best = minimize(negative, np.array([0.0, 1.0]), method="BFGS", options={"gtol": 1e-10}).x
    fit = histogram.fit()
    # scipy's BFGS stops at a gradient of 1e-10 on an objective with curvature ~1e3 per unit.
    np.testing.assert_allclose([fit.log_gamma, fit.kappa], best, atol=1e-6)


def test_at_the_fit_the_expected_clicks_equal_the_observed() -> None:
    p, y = draws(50_000, 0.6, 0.9, seed=3)
    fit = Histogram.empty().add(p, y).fit()
    expected = float(fit.apply(p).sum())
    # Exactly at the unpenalized optimum on the bins; the ridge (weight 1 against 50k
    # examples) and the bins' within-width spread leave well under 0.5%.
    assert expected / y.sum() == pytest.approx(1.0, rel=5e-3)


def test_kappa_never_turns_the_ranking_upside_down() -> None:
    # Clicks more likely at lower p: the unconstrained fit would have kappa < 0.
    p, _ = draws(20_000, 1.0, 1.0, seed=4)
    rng = np.random.default_rng(5)
    y = (rng.random(len(p)) < 0.004 / p).astype(np.float64)
    histogram = Histogram.empty().add(p, y)
    fit = histogram.fit()
    assert fit.kappa == 0.0
    # The constant is the penalized Poisson maximum over log gamma alone.
    count = histogram.sums[0].sum()
    centre = histogram.sums[2].sum() / count
    gradient = y.sum() - count * fit.gamma - PRIOR * (fit.log_gamma - centre)
    assert abs(gradient) < 1e-9 * y.sum()


def test_no_clicks_yet_gives_a_finite_fit_and_empty_gives_the_identity() -> None:
    assert Histogram.empty().fit() == PowerFit()
    fit = Histogram.empty().add(np.full(100, 0.3), np.zeros(100)).fit()
    assert math.isfinite(fit.log_gamma) and math.isfinite(fit.kappa)
    assert fit.apply(np.array([0.3]))[0] < 0.3


def test_served_probabilities_stay_inside_the_logit_clip() -> None:
    fit = PowerFit(log_gamma=3.0, kappa=0.5)
    q = fit.apply(np.array([LOW, 0.5, HIGH]))
    assert q.max() == HIGH and q.min() > LOW
    assert PowerFit(log_gamma=-80.0).apply(np.array([0.5]))[0] == LOW


def test_the_in_process_model_fits_after_each_batch_and_scores_before_it() -> None:
    rows = list(read_examples(CRITEO, "criteo", limit=600))
    hasher = FeatureHasher()
    model = InMemoryModel(get_rule("ftrl"), calibration="power")
    raw = InMemoryModel(get_rule("ftrl"))
    calibrator = Calibrator()
    for start in range(0, 600, 200):
        chunk = rows[start : start + 200]
        batch = hasher.batch([x for x, _ in chunk], [label for _, label in chunk])
        learned = model.learn(batch)
        # Calibration never changes what the model learns.
        np.testing.assert_array_equal(raw.learn(batch).probabilities, learned.probabilities)
        calibrator.learn(learned.probabilities, batch.labels)
    assert model.calibration is not None
    assert model.calibration.fit == calibrator.fit == calibrator.histogram.fit()
    assert model.calibration.metrics.count == 600
    assert model.calibration.fit != PowerFit()
