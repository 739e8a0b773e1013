"""Per-prediction uncertainty: each rule's step sizes against a direct transcription of the
formula its module documents, and McMahan et al.'s bound against the update it bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import unique_features
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.rules.base import Rule, uncertainty
from tests.core.test_rules_contract import random_params, stream_state


def transcribed_rate(rule: str, row: list[float], t: int, params: Any) -> float:
    """The step size of one feature, written out from the module docstrings, one float at
    a time (no numpy)."""
    if rule == "rda":
        return 1.0 / (params.gamma * math.sqrt(t + 1))
    n = row[1]  # every other rule keeps n, the sum of squared gradients, second
    if rule == "ftrl" and params.beta + math.sqrt(n) == 0:
        return float(params.alpha)
    return float(params.alpha / (params.beta + math.sqrt(n)))


@pytest.mark.parametrize("name", sorted(RULES))
@pytest.mark.parametrize("seed", range(5))
def test_rates_equal_the_transcription(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rule = get_rule(name)
    params = random_params(rule, rng)
    state = stream_state(rule, params, rng)
    t = int(rng.integers(0, 100))
    got = rule.rates(state, t, params)
    expected = [transcribed_rate(name, row, t, params) for row in state.tolist()]
    # The same operations on the same floats; numpy's sqrt and division are IEEE exact.
    assert got.tolist() == expected
    assert (got > 0).all()


def test_ftrl_with_beta_zero_is_the_papers_formula() -> None:
    # u(x) = alpha sum_i |x_i| / sqrt(n_i); a never-seen feature moves by exactly alpha.
    rule = get_rule("ftrl")
    params = rule.params(alpha=0.2, beta=0.0, l1=0.0, l2=0.0)
    state = np.array([[0.3, 4.0], [-1.0, 0.25], [0.0, 0.0]])
    assert rule.rates(state, 7, params).tolist() == [0.2 / 2.0, 0.2 / 0.5, 0.2]


def test_uncertainty_sums_x_squared_times_rate_per_example() -> None:
    hasher = FeatureHasher()
    examples = [{"a": "x", "p": 2.5}, {"a": "y", "p": -4.0, "tags": ["u", "v"]}, {}]
    batch = hasher.batch(examples)
    features = unique_features(batch)
    rule = get_rule("ftrl")
    params = rule.params()
    rng = np.random.default_rng(3)
    state = np.column_stack((rng.normal(size=len(features.ids)), rng.random(len(features.ids))))
    rates = rule.rates(state, 10, params)
    u = uncertainty(rates[features.inverse], batch.rows(), batch.values, len(batch))
    by_id = dict(zip(features.ids.tolist(), rates.tolist(), strict=True))
    expected = []
    for example in examples:
        names = [""]  # the bias
        values = [1.0]
        for field, value in example.items():
            if isinstance(value, str):
                names.append(f"{field}={value}")
                values.append(1.0)
            elif isinstance(value, list):
                names += [f"{field}={item}" for item in value]
                values += [1.0] * len(value)
            else:
                names.append(field)
                values.append(float(value))
        terms = [x * x * by_id[hasher.id(name)] for name, x in zip(names, values, strict=True)]
        expected.append(math.fsum(terms))
    np.testing.assert_allclose(u, expected, rtol=1e-15)


@pytest.mark.parametrize("seed", range(20))
def test_ftrl_uncertainty_bounds_how_far_the_next_update_moves_the_logit(seed: int) -> None:
    # McMahan et al. section 6: with l1 = l2 = 0, FTRL is SGD with eta = alpha / (beta +
    # sqrt(n + g^2)) <= alpha / (beta + sqrt(n)), and |g_i| = |p - y| |x_i| <= |x_i|; the
    # logit moves by |sum_i x_i eta_i g_i| <= sum_i eta_i x_i^2 (real-valued x here).
    rng = np.random.default_rng(seed)
    rule: Rule = get_rule("ftrl")
    params = rule.params(alpha=rng.uniform(0.01, 1), beta=rng.uniform(0, 2), l1=0.0, l2=0.0)
    state = stream_state(rule, params, rng)
    x = rng.normal(size=len(state)) * rng.choice([0.0, 1.0, 5.0], size=len(state))
    w = rule.weights(state, 40, params)
    s = float(x @ w)
    y = float(rng.integers(0, 2))
    g = (1 / (1 + math.exp(-s)) - y) * x
    moved = abs(float(x @ rule.weights(rule.update(state, g, g * g, 41, params), 41, params)) - s)
    u = float((x * x) @ rule.rates(state, 40, params))
    assert moved <= u * (1 + 1e-12)
