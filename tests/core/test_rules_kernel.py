"""Each rule's array math (``Rule.weights``, ``Rule.update``: its row math compiled over the
rows) is the numpy oracle of ``tests/core/rule_oracles.py`` to the bit, and so is its row math run
as plain Python; and a rule written as one module, known to no table, learns compiled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher, concat
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import RULES
from online_ctr.learning.rules.base import (
    AdaptiveRateParams,
    Array,
    Rule,
    never_expires,
    per_coordinate_rates,
    rate,
    scalar,
)
from tests.core.rule_oracles import ORACLES
from tests.core.test_rules_contract import random_params, stream_state
from tests.core.test_sequential import MINIBATCH_RTOL, STATE_ATOL

NAMES = sorted(RULES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(5))
def test_array_math_is_the_numpy_oracle_bit_for_bit(name: str, seed: int) -> None:
    """Over random hyper-parameters and streamed state: the weights at one step and at a step
    per row, and an update, compiled and in numpy, and the row math run uncompiled."""
    rule, rng = RULES[name], np.random.default_rng(seed)
    oracle_weights, oracle_update = ORACLES[name]
    params = random_params(rule, rng)
    state = stream_state(rule, params, rng, width=40)
    t = int(rule.latest_step(state)) + int(rng.integers(0, 30))
    steps = np.maximum(t - rng.integers(0, 30, size=len(state)), rule.latest_step(state))
    assert same(rule.weights(state, t, params), oracle_weights(state, t, params))
    assert same(rule.weights(state, steps, params), oracle_weights(state, steps, params))
    g = rng.normal(size=len(state))
    expected = oracle_update(state, g, g * g, t + 1, params)
    before = state.copy()
    assert same(rule.update(state, g, g * g, t + 1, params), expected)
    assert same(state, before)  # left alone
    p = rule.kernel_params(params)
    row_weights = [rule.weight_of(state, i, float(t), p) for i in range(len(state))]
    assert same(np.array(row_weights), oracle_weights(state, t, params))
    for i in range(len(state)):
        rule.update_row(state, i, g[i], g[i] * g[i], float(t + 1), p)
    assert same(state, expected)


def test_special_values_are_the_oracles() -> None:
    """Zeros, infinities and NaN in the state and the gradients (error_model="numpy": IEEE
    results where Python would raise), at step 0 and later."""
    special = np.array([0.0, -0.0, 1e-300, 1.0, -2.5, 1e300, np.inf, -np.inf, np.nan])
    rng = np.random.default_rng(7)
    for name in NAMES:
        rule = RULES[name]
        oracle_weights, oracle_update = ORACLES[name]
        params = random_params(rule, rng)
        state = rng.choice(special, size=(64, len(rule.fields)))
        g = rng.choice(special, size=64)
        with np.errstate(all="ignore"):
            for t in (0, 1, 12):
                assert same(rule.weights(state, t, params), oracle_weights(state, t, params))
                expected = oracle_update(state, g, g * g, t + 1, params)
                assert same(rule.update(state, g, g * g, t + 1, params), expected)


def same(a: Array, b: Array) -> bool:
    """Equal to the bit but for a NaN's sign and payload: same shape, NaN where NaN, and every
    other value the same bits (so zeros of the same sign)."""
    nan = np.isnan(a)
    return (
        a.shape == b.shape
        and np.array_equal(nan, np.isnan(b))
        and np.array_equal(a[~nan].view(np.uint64), b[~nan].view(np.uint64))
    )


@dataclass(frozen=True)
class ToyParams(AdaptiveRateParams):
    """Plain SGD with per-coordinate rates."""


@scalar
def toy_weight_of(state: Array, i: int, t: float, p: Array) -> float:
    w: float = state[i, 0]
    return w


@scalar
def toy_update_row(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    n = state[i, 1] + g2
    state[i, 0] = state[i, 0] - rate(n, p[0], p[1]) * g
    state[i, 1] = n


TOY = Rule(
    name="toy_sgd",
    title="plain SGD, for this test",
    fields=("w", "n"),
    params_type=ToyParams,
    expiry=never_expires,
    rates=per_coordinate_rates,
    weight_of=toy_weight_of,
    update_row=toy_update_row,
)


def test_a_new_rule_needs_no_table_to_learn_compiled() -> None:
    """Sequential learning of the whole stream and mini-batches of one example, both compiled
    from the toy's row math alone, agree."""
    params = ToyParams(alpha=0.3, beta=1.0)
    hasher = FeatureHasher()
    examples = [
        hasher.batch([{"site": f"s{j % 3}", "ad": f"a{j % 5}"}], labels=[j % 2]) for j in range(40)
    ]
    compiled, oracle = InMemoryModel(TOY, params), InMemoryModel(TOY, params, minibatch=True)
    learned = compiled.learn(concat(examples))
    expected = [oracle.learn(one).probabilities[0] for one in examples]
    # numpy's exp and libm's differ in the last bit (test_sequential's tolerances, as there)
    np.testing.assert_allclose(learned.probabilities, expected, rtol=MINIBATCH_RTOL, atol=0)
    mine, theirs = compiled.snapshot(), oracle.snapshot()
    assert mine.keys() == theirs.keys()
    for k in mine:
        np.testing.assert_allclose(mine[k], theirs[k], rtol=MINIBATCH_RTOL, atol=STATE_ATOL)
