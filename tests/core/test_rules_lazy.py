"""Lazy regularization and expiry: what untouched features do between touches.

FOBOS, truncated gradient and simple truncation regularize every coordinate on every round;
the rules only touch the features present and catch up on the rest when next touched (or read).
RDA's weights depend on the global step ``t`` itself. Here a dense reference applies each rule
to every coordinate on every step, and the lazy rule must agree after every step, on touched
and untouched coordinates alike. ``expiry`` must name the exact first step at which an
untouched weight is zero, so that a nonzero count kept by bookkeeping alone stays exact.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import unique_features
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.planted import planted_stream
from online_ctr.learning.rules import RULES, fobos, rda, tg, truncation
from online_ctr.learning.rules.base import Array, Rule
from tests.core.rule_oracles import soft_threshold

WIDTH, STEPS, PRESENCE = 8, 200, 0.3


def drifting_gradients(seed: int, steps: int = STEPS, width: int = WIDTH) -> Array:
    """Sparse gradients with a per-coordinate mean, so weights grow, shrink and cross zero."""
    rng = np.random.default_rng(seed)
    mean = rng.uniform(-0.6, 0.6, size=width)
    g = mean + rng.normal(scale=0.5, size=(steps, width))
    return np.where(rng.random((steps, width)) < PRESENCE, g, 0.0)


def eta(n: Array, params: Any) -> Array:
    """The per-coordinate rate, as algorithms.md defines it."""
    return np.asarray(params.alpha / (params.beta + np.sqrt(n)))


@dataclass
class Dense:
    """A dense reference: every coordinate, every step. ``step`` returns the new weights."""

    w: Array
    n: Array
    z: Array

    @classmethod
    def zeros(cls) -> Dense:
        return cls(np.zeros(WIDTH), np.zeros(WIDTH), np.zeros(WIDTH))


def fobos_step(d: Dense, g: Array, t: int, p: fobos.FOBOSParams) -> Array:
    d.n = d.n + g * g
    rate = eta(d.n, p)
    d.w = soft_threshold(d.w - rate * g, rate * p.l1)
    return d.w


def tg_step(d: Dense, g: Array, t: int, p: tg.TGParams) -> Array:
    d.n = d.n + g * g
    rate = eta(d.n, p)
    v = d.w - rate * g
    if t % p.k == 0:
        a = p.k * rate * p.l1
        v = np.where((v >= 0) & (v <= p.theta), np.maximum(0.0, v - a), v)
        v = np.where((v < 0) & (v >= -p.theta), np.minimum(0.0, v + a), v)
    d.w = v
    return d.w


def truncation_step(d: Dense, g: Array, t: int, p: truncation.TruncationParams) -> Array:
    d.n = d.n + g * g
    v = d.w - eta(d.n, p) * g
    d.w = np.where((t % p.k == 0) & (np.abs(v) <= p.theta), 0.0, v)
    return d.w


def rda_step(d: Dense, g: Array, t: int, p: rda.RDAParams) -> Array:
    d.z = d.z + g
    gbar = d.z / t
    w = -(np.sqrt(t) / p.gamma) * (gbar - p.l1 * np.sign(gbar))
    d.w = np.where(np.abs(gbar) <= p.l1, 0.0, w)
    return d.w


DenseStep = Callable[[Dense, Array, int, Any], Array]

# (rule, params, dense step, tolerance). Tolerances: truncation's lazy form performs the same
# operations as the dense one, so it is exact. RDA's dense weight is the same few rounded
# operations on the same z (sums of the same gradients in the same order), written
# independently: a few ulps, rtol 1e-14. FOBOS and TG replace m subtractions of ``a`` by one of
# ``m a``: each subtraction rounds by half an ulp of |w| (|w| < 5 here, so < 5.6e-16), 200
# steps drift by at most ~1.1e-13, and the 1-Lipschitz steps do not amplify it: atol 1e-12 is
# 9x that bound (measured: < 6e-15).
LAZY_CASES: list[tuple[str, Any, DenseStep, dict[str, float]]] = [
    ("fobos", fobos.FOBOSParams(alpha=0.5, beta=1.0, l1=0.05), fobos_step, {"atol": 1e-12}),
    ("fobos", fobos.FOBOSParams(alpha=0.1, beta=0.5, l1=0.3), fobos_step, {"atol": 1e-12}),
    ("tg", tg.TGParams(alpha=0.5, beta=1.0, l1=0.05, theta=0.4, k=3), tg_step, {"atol": 1e-12}),
    ("tg", tg.TGParams(alpha=0.5, beta=1.0, l1=0.1, theta=math.inf, k=1), tg_step, {"atol": 1e-12}),
    ("tg", tg.TGParams(alpha=0.3, beta=2.0, l1=0.2, theta=0.2, k=2), tg_step, {"atol": 1e-12}),
    ("truncation", truncation.TruncationParams(alpha=0.5, theta=0.15, k=3), truncation_step, {}),
    ("truncation", truncation.TruncationParams(alpha=0.5, theta=0.05, k=2), truncation_step, {}),
    ("rda", rda.RDAParams(l1=0.1, gamma=1.0), rda_step, {"rtol": 1e-14}),
    ("rda", rda.RDAParams(l1=0.03, gamma=0.2), rda_step, {"rtol": 1e-14}),
]


def case_id(case: tuple[str, Any, DenseStep, dict[str, float]]) -> str:
    return f"{case[0]}-{case[1]}"


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", LAZY_CASES, ids=case_id)
def test_lazy_rule_equals_dense_reference_after_every_step(
    case: tuple[str, Any, DenseStep, dict[str, float]], seed: int
) -> None:
    name, params, dense_step, tolerance = case
    rule = RULES[name]
    state, dense = rule.zeros(WIDTH), Dense.zeros()
    previous = np.zeros(WIDTH)
    moved_untouched = 0
    for t, g in enumerate(drifting_gradients(seed), start=1):
        present = g != 0
        state[present] = rule.update(state[present], g[present], g[present] ** 2, t, params)
        lazy = rule.weights(state, t, params)
        expected = dense_step(dense, g, t, params)
        if tolerance:
            np.testing.assert_allclose(lazy, expected, **{"rtol": 0.0, **tolerance})
        else:
            np.testing.assert_array_equal(lazy, expected)
        # Rounding differences never put a weight on the other side of zero.
        np.testing.assert_array_equal(lazy == 0, expected == 0)
        moved_untouched += int(np.count_nonzero(~present & (lazy != previous)))
        previous = lazy
    assert moved_untouched > 0, "no untouched weight ever changed: laziness is untested"


# Random states for the expiry checks: the states of sparse streams, read at many steps.
EXPIRY_PARAMS: list[tuple[str, dict[str, float]]] = [
    ("ftrl", {"alpha": 0.3, "l1": 0.5, "l2": 0.1}),
    ("rda", {"l1": 0.1, "gamma": 1.0}),
    ("rda", {"l1": 0.0, "gamma": 1.0}),
    ("fobos", {"alpha": 0.5, "l1": 0.05}),
    ("fobos", {"alpha": 0.5, "l1": 0.0}),
    ("tg", {"alpha": 0.5, "l1": 0.05, "theta": 0.4, "k": 3}),
    ("tg", {"alpha": 0.5, "l1": 0.02, "theta": math.inf, "k": 1}),
    ("truncation", {"alpha": 0.5, "theta": 0.15, "k": 4}),
    ("l1sgd", {"alpha": 0.5, "l1": 0.05}),
]


def stream_states(rule: Rule, params: Any, seed: int) -> list[tuple[Array, int]]:
    """``(state of all coordinates, t)`` after every step of a sparse stream."""
    state = rule.zeros(WIDTH)
    out = []
    for t, g in enumerate(drifting_gradients(seed, steps=120), start=1):
        present = g != 0
        state[present] = rule.update(state[present], g[present], g[present] ** 2, t, params)
        out.append((state.copy(), t))
    return out


def far_states(rule: Rule, params: Any) -> list[tuple[Array, int]]:
    """States touched at huge steps, where float steps must still land exactly."""
    t = 10**9 + 7
    g = np.array([0.7, -1.3, 0.01, 2.0])
    if rule.name == "rda":
        g = g * t  # RDA's weight depends on the average gradient z / t
    state = rule.update(rule.zeros(4), g, g * g, t, params)
    return [(state, t)]


def assert_expiry_exact(rule: Rule, params: Any, state: Array, t: int) -> tuple[int, int]:
    """Check ``expiry`` on the nonzero rows; return (finite expiries, those beyond t + 1)."""
    nonzero = rule.weights(state, t, params) != 0
    state = state[nonzero]
    e = rule.expiry(state, t, params)
    assert e.shape == (len(state),)
    assert np.all(e > t)
    finite = np.isfinite(e)
    np.testing.assert_array_equal(rule.weights(state[finite], e[finite], params), 0.0)
    before = finite & (e - 1 > t)
    assert np.all(rule.weights(state[before], e[before] - 1, params) != 0)
    for later in (1, 10**3, 10**6, 10**12):
        assert np.all(rule.weights(state[~finite], float(t + later), params) != 0)
    return int(finite.sum()), int(before.sum())


@pytest.mark.parametrize(("name", "values"), EXPIRY_PARAMS)
def test_expiry_is_the_first_step_at_which_an_untouched_weight_is_zero(
    name: str, values: dict[str, float]
) -> None:
    rule = RULES[name]
    params = rule.params(**values)
    finite = beyond = 0
    for seed in range(3):
        for state, t in stream_states(rule, params, seed) + far_states(rule, params):
            f, b = assert_expiry_exact(rule, params, state, t)
            finite, beyond = finite + f, beyond + b
    shrinks = name in {"rda", "fobos", "tg", "truncation"} and values.get("l1", 1.0) > 0
    if shrinks:
        assert finite > 0 and beyond > 0, "no finite expiry was checked"
    else:
        assert finite == 0, f"{name} with {values} should never expire"


@pytest.mark.parametrize(("name", "values"), EXPIRY_PARAMS)
def test_untouched_weights_move_monotonically_towards_zero(
    name: str, values: dict[str, float]
) -> None:
    """The premise of expiry: between touches |w| never grows and w never changes sign."""
    rule = RULES[name]
    params = rule.params(**values)
    for state, t in stream_states(rule, params, seed=5)[::10]:
        steps = np.arange(t, t + 60, dtype=np.float64)
        w = np.stack([rule.weights(state, s, params) for s in steps])
        assert np.all(np.diff(np.abs(w), axis=0) <= 0)
        assert np.all(np.sign(w[1:]) * np.sign(w[0]) >= 0)


class ExpiryCount:
    """A nonzero-weight count from expiry bookkeeping alone, as a store would keep it.

    Only the features of each batch are looked at; the others leave the count when their
    expiry step comes, through a heap of ``(expiry, id)`` with stale entries skipped.
    """

    def __init__(self) -> None:
        self.expiry: dict[int, float] = {}
        self.heap: list[tuple[float, int]] = []
        self.expired = 0

    def touched(self, ids: list[int], w: Array, e: Array) -> None:
        for key, wi, ei in zip(ids, w.tolist(), e.tolist(), strict=True):
            if wi != 0:
                self.expiry[key] = ei
                if math.isfinite(ei):
                    heapq.heappush(self.heap, (ei, key))
            else:
                self.expiry.pop(key, None)

    def advance(self, t: int) -> int:
        while self.heap and self.heap[0][0] <= t:
            step, key = heapq.heappop(self.heap)
            if self.expiry.get(key) == step:
                del self.expiry[key]
                self.expired += 1
        return len(self.expiry)


COUNT_PARAMS: dict[str, dict[str, float]] = {
    "ftrl": {"alpha": 0.3, "l1": 3.0},
    "rda": {"l1": 0.02, "gamma": 0.3},
    "fobos": {"alpha": 0.5, "l1": 0.02},
    "tg": {"alpha": 0.5, "l1": 0.02, "theta": 0.5, "k": 3},
    "truncation": {"alpha": 0.5, "theta": 0.1, "k": 5},
    "l1sgd": {"alpha": 0.5, "l1": 0.01},
}


@pytest.mark.parametrize("batch_size", [1, 7])
@pytest.mark.parametrize("name", sorted(RULES))
def test_expiry_bookkeeping_keeps_an_exact_nonzero_count(name: str, batch_size: int) -> None:
    assert set(COUNT_PARAMS) == set(RULES), "every rule needs parameters here"
    rule = RULES[name]
    model = InMemoryModel(rule, rule.params(**COUNT_PARAMS[name]))
    stream = planted_stream(1400, n_fields=4, n_values=15, seed=3)
    hasher = FeatureHasher()
    count = ExpiryCount()
    counts = []
    for start in range(0, len(stream.examples), batch_size):
        stop = start + batch_size
        batch = hasher.batch(stream.examples[start:stop], stream.labels[start:stop])
        model.learn(batch)
        ids = unique_features(batch).ids
        state = model.state_of(ids)[:, :-1]
        count.touched(
            ids.tolist(),
            rule.weights(state, model.t, model.params),
            rule.expiry(state, model.t, model.params),
        )
        counts.append(count.advance(model.t))
        assert counts[-1] == model.nonzero_weights(), f"at step {model.t}"
    if name != "l1sgd":  # L1-SGD's weights are almost never exactly zero: its point
        assert np.any(np.diff(counts) < 0), "the count never went down: zeroing is untested"
    if name in {"rda", "fobos", "tg", "truncation"}:
        assert count.expired > 0, "no untouched feature expired: the bookkeeping is untested"
