"""The warm start: every rule's seeded state has the batch weights, and the file says so."""

from __future__ import annotations

import numpy as np
import pytest

from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.owlqn import design_from_batch, loss_and_gradient, minimize
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.snapshot import Header, RowChunk
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.learning.warm_start import seed_state, seed_step, snapshot, squared_gradients

#: Hyper-parameters where every rule's shrinkage is active (l1, theta, k), so the seeded state
#: must be exactly at the step where nothing is pending yet.
PARAMS = {
    "ftrl": {"alpha": 0.05, "beta": 1.0, "l1": 2.0, "l2": 0.5},
    "rda": {"l1": 0.01, "gamma": 2.0},
    "fobos": {"alpha": 0.1, "beta": 1.0, "l1": 0.1},
    "tg": {"alpha": 0.1, "beta": 1.0, "l1": 0.1, "theta": 0.5, "k": 3},
    "truncation": {"alpha": 0.1, "beta": 1.0, "theta": 0.5, "k": 3},
    "l1sgd": {"alpha": 0.1, "beta": 1.0, "l1": 0.1},
}


@pytest.mark.parametrize("name", sorted(RULES))
@pytest.mark.parametrize("examples", [1, 10_000])
def test_each_rules_seeded_weights_are_the_batch_weights(name: str, examples: int) -> None:
    rule = get_rule(name)
    params = rule.params(**PARAMS[name])
    rng = np.random.default_rng(3)
    w = rng.standard_normal(5000) * 10.0 ** rng.integers(-8, 2, 5000)
    w[rng.random(5000) < 0.3] = 0.0  # sparse, as an L1 optimum is
    g2 = rng.exponential(5.0, 5000)
    t = seed_step(rule, examples)
    weights = rule.weights(seed_state(rule, params, w, g2, t), t, params)
    # Zero stays exactly zero; the others are w up to a few roundings of the inversion.
    np.testing.assert_array_equal(weights == 0, w == 0)
    bound = 4 * EPS * (np.abs(w) + slack(name, g2, t))
    np.testing.assert_array_less(np.abs(weights - w), bound + 1e-300)  # strict "<": 0 < tiny


EPS = np.finfo(np.float64).eps


def slack(name: str, g2: np.ndarray, t: int) -> np.ndarray | float:
    """The weight's rounding beyond |w|'s own: FTRL and RDA store ``z`` = (a term in w) + l1,
    and the weight is ``z - sgn(z) l1`` scaled, so z's rounding (eps |z|, about eps l1) is
    left in the weight as ``eps l1 / d`` (FTRL, ``d = (beta + sqrt(n)) / alpha + l2``) or
    ``eps l1 sqrt(t) / gamma`` (RDA). The other rules store w itself: exact."""
    p = PARAMS[name]
    if name == "ftrl":
        return p["l1"] / ((p["beta"] + np.sqrt(g2)) / p["alpha"] + p["l2"])
    if name == "rda":
        return p["l1"] * np.sqrt(t) / p["gamma"]
    return 0.0


def test_the_step_is_zero_except_for_rda() -> None:
    assert {name: seed_step(get_rule(name), 500) for name in RULES} == {
        "fobos": 0, "ftrl": 0, "l1sgd": 0, "rda": 500, "tg": 0, "truncation": 0
    }  # fmt: skip


def test_n_is_the_sum_of_squared_gradients_at_the_optimum() -> None:
    hasher = FeatureHasher()
    rows = [{"site": f"s{i % 7}", "device": f"d{i % 3}"} for i in range(200)]
    design = design_from_batch(hasher.batch(rows, [int(i % 5 == 0) for i in range(200)]))
    w = minimize(design, C=1.0).w
    g2 = squared_gradients(design, w)
    # Summed per example, its square root bounds the summed gradient (Cauchy-Schwarz) ...
    _, gradient = loss_and_gradient(design, w)
    assert np.all(np.abs(gradient) <= np.sqrt(g2 * 200) + 1e-12)
    # ... and for the bias (x = 1 in every example) it is sum (p - y)^2.
    p = 1.0 / (1.0 + np.exp(-design.dot(w)))
    bias = int(np.flatnonzero(np.isin(design.ids, hasher.batch([{}]).ids))[0])
    assert g2[bias] == pytest.approx(np.sum((p - design.labels) ** 2), rel=1e-12)


@pytest.mark.parametrize("base_rate", ["mean", "off"])
@pytest.mark.parametrize("name", ["ftrl", "rda"])
def test_the_warm_start_file_describes_the_seeded_model(name: str, base_rate: str) -> None:
    """The seeded weights are the batch's, but for the bias, which gives up the prior's
    share (the log-odds of the batch's 75 clicks in 300): prior + weights are the batch's."""
    rule = get_rule(name)
    params = rule.params(**PARAMS[name])
    rows = [{"site": f"s{i % 11}"} for i in range(300)]
    design = design_from_batch(FeatureHasher().batch(rows, [int(i % 4 == 0) for i in range(300)]))
    result = minimize(design, C=0.5)
    reader = Reader()
    prior = BaseRate.parse(base_rate)
    blob = snapshot(rule, params, design, result.w, None, result.loss, base_rate=prior)
    items = reader.feed(blob)
    footer = reader.close()
    (header,) = [item for item in items if isinstance(item, Header)]
    assert header.base_rate == base_rate
    assert (footer.base_clicks, footer.base_examples) == (75.0, 300.0)
    expected = result.w.copy()
    bias = np.isin(design.ids, FeatureHasher().batch([{}]).ids)
    expected[bias] -= prior.logit(np.array([75.0, 300.0]))
    assert (expected[bias] != result.w[bias]) == (base_rate == "mean")
    (chunk,) = [item for item in items if isinstance(item, RowChunk)]
    np.testing.assert_array_equal(chunk.ids, design.ids)
    weights = rule.weights(chunk.state, footer.t, params)
    g2 = squared_gradients(design, result.w)
    bound = 4 * EPS * (np.abs(expected) + slack(name, g2, footer.t))
    np.testing.assert_array_less(np.abs(weights - expected), bound + 1e-300)
    assert footer.features_tracked == design.n_features
    assert footer.nonzero_weights == result.nonzero_weights
    assert footer.t == (300 if name == "rda" else 0)
