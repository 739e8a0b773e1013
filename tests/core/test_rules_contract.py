"""What every registered rule promises (``online_ctr/learning/rules/base.py``), checked for all of
them."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.rules.base import Array, Rule

NAMES = sorted(RULES)

#: Invalid values of every hyper-parameter any rule has. A rule gaining a hyper-parameter
#: fails ``test_every_hyper_parameter_has_invalid_values_listed`` until it is added here.
INVALID: dict[str, list[float]] = {
    "alpha": [0.0, -0.1, math.nan],
    "beta": [-1.0, math.nan],
    "l1": [-1e-9, -1.0, math.nan],
    "l2": [-1.0, math.nan],
    "gamma": [0.0, -2.0, math.nan],
    "theta": [-0.5, math.nan],
    "k": [0, -3, 1.5],
}


def random_params(rule: Rule, rng: np.random.Generator) -> Any:
    """Valid hyper-parameters, drawn across their whole range (zeros and infinity included)."""
    draw = {
        "alpha": lambda: rng.uniform(0.01, 1.0),
        "beta": lambda: rng.uniform(0.1, 2.0),
        "l1": lambda: rng.choice([0.0, rng.uniform(0.0, 0.5)]),
        "l2": lambda: rng.choice([0.0, rng.uniform(0.0, 2.0)]),
        "gamma": lambda: rng.uniform(0.1, 3.0),
        "theta": lambda: rng.choice([math.inf, rng.uniform(0.0, 1.0)]),
        "k": lambda: int(rng.choice([1, 2, 5])),
    }
    fields = dataclasses.fields(rule.params_type)
    return rule.params_type(**{f.name: draw[f.name]() for f in fields})


def stream_state(rule: Rule, params: Any, rng: np.random.Generator, width: int = 6) -> Array:
    """The state of ``width`` features after a short sparse stream, plus two never-seen ones."""
    state = rule.zeros(width + 2)
    for t in range(1, 40):
        present = np.zeros(width + 2, dtype=bool)
        present[:width] = rng.random(width) < 0.5
        g = rng.normal(size=int(present.sum()))
        state[present] = rule.update(state[present], g, g * g, t, params)
    return state


def read_only(*arrays: Array) -> list[Array]:
    """Copies that raise on any in-place write."""
    out = []
    for a in arrays:
        b = a.copy()
        b.flags.writeable = False
        out.append(b)
    return out


def test_registry_names_match_rules() -> None:
    assert NAMES == ["fobos", "ftrl", "l1sgd", "rda", "tg", "truncation"]
    for name, rule in RULES.items():
        assert rule.name == name
        assert get_rule(name) is rule
        assert rule.title
        assert len(set(rule.fields)) == len(rule.fields) > 0


def test_unknown_rule_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown rule 'sgd'; choose one of fobos, ftrl, "):
        get_rule("sgd")


@pytest.mark.parametrize("name", NAMES)
def test_params_are_frozen_dataclasses_with_valid_defaults(name: str) -> None:
    rule = RULES[name]
    assert dataclasses.is_dataclass(rule.params_type)
    params = rule.params_type()
    field = dataclasses.fields(params)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(params, field, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("name", NAMES)
def test_every_hyper_parameter_has_invalid_values_listed(name: str) -> None:
    missing = {f.name for f in dataclasses.fields(RULES[name].params_type)} - set(INVALID)
    assert not missing, f"add invalid values for {missing} to INVALID"


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        (name, f.name, value)
        for name in NAMES
        for f in dataclasses.fields(RULES[name].params_type)
        for value in INVALID[f.name]
    ],
)
def test_invalid_hyper_parameters_raise_a_clear_value_error(
    name: str, field: str, value: float
) -> None:
    """The message names the parameter first and quotes the value it got."""
    pattern = rf"^{field}\b.* got {re.escape(str(value))}$"
    with pytest.raises(ValueError, match=pattern):
        RULES[name].params_type(**{field: value})


@pytest.mark.parametrize("name", ["fobos", "tg", "truncation", "l1sgd"])
def test_zero_beta_is_refused_where_it_would_make_nan_weights(name: str) -> None:
    with pytest.raises(ValueError, match=r"^beta must be > 0, got 0.0$"):
        RULES[name].params(beta=0.0)


def test_ftrl_accepts_zero_beta_and_stays_finite() -> None:
    rule = RULES["ftrl"]
    params = rule.params(beta=0.0, l1=0.0, l2=0.0)
    state = rule.update(rule.zeros(2), np.array([0.5, 0.0]), np.array([0.25, 0.0]), 1, params)
    assert np.isfinite(rule.weights(state, 1, params)).all()


@pytest.mark.parametrize("name", NAMES)
def test_params_builder_ignores_names_the_rule_does_not_use(name: str) -> None:
    rule = RULES[name]
    everything = {"alpha": 0.2, "beta": 0.5, "l1": 0.01, "l2": 0.1, "gamma": 2.0}
    everything |= {"theta": 0.5, "k": 2, "momentum": 0.9}
    params = rule.params(**everything)
    for f in dataclasses.fields(params):
        assert getattr(params, f.name) == everything[f.name]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", NAMES)
def test_shapes_follow_the_fields(name: str, seed: int) -> None:
    rule = RULES[name]
    rng = np.random.default_rng(seed)
    params = random_params(rule, rng)
    k = 8
    state = stream_state(rule, params, rng)
    assert rule.zeros(k).shape == state.shape == (k, len(rule.fields))
    g = rng.normal(size=k)
    new = rule.update(state, g, g * g, 40, params)
    assert new.shape == (k, len(rule.fields)) and new.dtype == np.float64
    for out in (rule.weights(new, 40, params), rule.expiry(new, 40, params)):
        assert out.shape == (k,) and out.dtype == np.float64
    assert rule.update(rule.zeros(0), np.zeros(0), np.zeros(0), 5, params).shape == (
        0,
        len(rule.fields),
    )
    assert rule.weights(rule.zeros(0), 5, params).shape == (0,)
    assert rule.expiry(rule.zeros(0), 5, params).shape == (0,)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", NAMES)
def test_functions_do_not_mutate_their_inputs(name: str, seed: int) -> None:
    rule = RULES[name]
    rng = np.random.default_rng(seed)
    params = random_params(rule, rng)
    state = stream_state(rule, params, rng)
    g = rng.normal(size=len(state))
    g2 = g * g
    before = [state.copy(), g.copy(), g2.copy()]
    frozen_state, frozen_g, frozen_g2 = read_only(state, g, g2)
    t = 45
    steps = np.arange(t, t + len(state), dtype=np.float64)
    frozen_steps = read_only(steps)[0]
    # Read-only inputs make any in-place write raise; the copies catch aliasing of outputs.
    new = rule.update(frozen_state, frozen_g, frozen_g2, t, params)
    w = rule.weights(frozen_state, t, params)
    rule.weights(frozen_state, frozen_steps, params)
    rule.expiry(frozen_state, t - 5, params)
    new[...] = 7.0
    w[...] = 7.0
    for original, array in zip(before, (frozen_state, frozen_g, frozen_g2), strict=True):
        np.testing.assert_array_equal(array, original)
    np.testing.assert_array_equal(steps, np.arange(t, t + len(state)))


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", NAMES)
def test_weights_take_one_step_per_row(name: str, seed: int) -> None:
    """``weights(state, s)`` with an array ``s`` is the rows' weights each at its own step."""
    rule = RULES[name]
    rng = np.random.default_rng(seed)
    params = random_params(rule, rng)
    state = stream_state(rule, params, rng)
    steps = 39 + rng.integers(0, 30, size=len(state)).astype(np.float64)
    one_by_one = [rule.weights(state[i : i + 1], float(s), params)[0] for i, s in enumerate(steps)]
    np.testing.assert_array_equal(rule.weights(state, steps, params), one_by_one)


@pytest.mark.parametrize("name", NAMES)
def test_never_seen_features_weigh_zero_at_every_step(name: str) -> None:
    rule = RULES[name]
    params = rule.params_type()
    for t in (0, 1, 2, 10**6):
        assert rule.weights(rule.zeros(3), t, params).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", [name for name in NAMES if name != "l1sgd"])
def test_a_touch_with_no_gradient_is_a_round_without_the_feature(name: str, seed: int) -> None:
    """``g = 0`` is how every rule sees a round without the feature (algorithms.md).

    L1-SGD is left out on purpose: it regularizes only the coordinates present, so a touch
    with ``g = 0`` still pays ``l1 sgn(w)``, which is the flaw seed 001 points at.
    """
    rule = RULES[name]
    rng = np.random.default_rng(seed)
    params = random_params(rule, rng)
    state = stream_state(rule, params, rng)
    zero = np.zeros(len(state))
    untouched = rule.weights(state, 40, params)
    touched = rule.weights(rule.update(state, zero, zero, 40, params), 40, params)
    # FOBOS and TG catch up to step 39 and then shrink once more, S_a(S_b(w)), where the lazy
    # read shrinks once, S_(a+b)(w): two roundings against one, at most 2 ulps of |w|.
    # The other rules do the same operations both ways (or add exact zeros): bit for bit.
    atol = 4 * np.finfo(np.float64).eps * np.abs(untouched).max() if name in {"fobos", "tg"} else 0
    np.testing.assert_allclose(touched, untouched, rtol=0, atol=atol)
