"""Each rule's per-row math (``weight_of``, ``update_row``, which the compiled learner is built
from) is its array math (``weights``, ``update``) row by row, to the bit; and a rule written as
one module, known to no table, learns in the compiled loop as its array math says."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher, concat
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import RULES
from online_ctr.learning.rules.base import (
    AdaptiveRateParams,
    Array,
    Rule,
    adaptive_rate,
    never_expires,
    per_coordinate_rates,
    rate,
    scalar,
)
from tests.core.test_rules_contract import random_params, stream_state
from tests.core.test_sequential import MINIBATCH_RTOL, STATE_ATOL

NAMES = sorted(RULES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", range(5))
def test_row_math_is_the_array_math_bit_for_bit(name: str, seed: int) -> None:
    rule, rng = RULES[name], np.random.default_rng(seed)
    params = random_params(rule, rng)
    p = rule.kernel_params(params)
    state = stream_state(rule, params, rng, width=40)
    t = int(rule.latest_step(state)) + int(rng.integers(0, 30))
    row_weights = [rule.weight_of(state, i, float(t), p) for i in range(len(state))]
    assert np.array_equal(rule.weights(state, t, params), row_weights, equal_nan=True)
    g = rng.normal(size=len(state))
    updated = state.copy()
    for i in range(len(state)):
        rule.update_row(updated, i, g[i], g[i] * g[i], float(t + 1), p)
    expected = rule.update(state, g, g * g, t + 1, params)
    assert np.array_equal(updated, expected, equal_nan=True)


@dataclass(frozen=True)
class ToyParams(AdaptiveRateParams):
    """Plain SGD with per-coordinate rates."""


def toy_weights(state: Array, t: Any, params: ToyParams) -> Array:
    return state[:, 0].copy()


def toy_update(state: Array, g: Array, g2: Array, t: int, params: ToyParams) -> Array:
    n = state[:, 1] + g2
    return np.column_stack((state[:, 0] - adaptive_rate(n, params.alpha, params.beta) * g, n))


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
    weights=toy_weights,
    update=toy_update,
    expiry=never_expires,
    rates=per_coordinate_rates,
    weight_of=toy_weight_of,
    update_row=toy_update_row,
)


def test_a_new_rule_needs_no_table_to_learn_compiled() -> None:
    """Sequential learning of the whole stream, compiled from the toy's row math, equals
    mini-batches of one example, the toy's array math."""
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
