"""Truncated gradient, applied lazily.

Langford, Li & Zhang, "Sparse Online Learning via Truncated Gradient", JMLR 2009 (seed 001),
with per-coordinate rates ``eta_i = alpha / (beta + sqrt(n_i))``. Every step is plain SGD;
every ``k``-th step also truncates every coordinate with

    T1(v, a, theta) = max(0, v - a) if v in [0, theta];  min(0, v + a) if v in [-theta, 0];
                      v otherwise,                      a = k eta_i l1  (l1 is the gravity g)

A feature absent for a while only meets truncation events: ``m`` of them shrink it by
``S_(m a)`` if ``|w| <= theta`` and leave it alone otherwise (it never crosses ``theta``
inwards past zero). State per feature: ``w`` as of its last touch, ``n`` and ``t_last``.
``theta = inf`` and ``k = 1`` give L1-clipped SGD; ``k eta l1 = theta`` gives simple truncation.

Uncertainty: FTRL's form with this rule's own rate, ``u(x) = sum_i x_i^2 eta_i`` with
``eta_i = alpha / (beta + sqrt(n_i))``, the gradient step per unit gradient (truncation only
shrinks a weight towards zero, which the bound does not count).

>>> params = TGParams(alpha=0.5, beta=1.0, l1=0.1, theta=1.0, k=2)
>>> state = RULE.update(RULE.zeros(1), np.array([-1.0]), np.array([1.0]), 2, params)
>>> state
array([[0.2, 1. , 2. ]])
>>> RULE.weights(state, 4, params)
array([0.15])
>>> expiry(state, 2, params)
array([10.])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from online_ctr.learning.rules.base import (
    NEVER,
    AdaptiveL1Params,
    Array,
    Rule,
    Step,
    adaptive_rate,
    first_zero_step,
    per_coordinate_rates,
    rate,
    require,
    require_period,
    scalar,
    shrink,
)


@dataclass(frozen=True)
class TGParams(AdaptiveL1Params):
    """Truncated gradient: rates ``alpha``/``beta``, gravity ``l1``, ``theta``, period ``k``."""

    theta: float = math.inf
    k: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.theta >= 0, f"theta must be >= 0, got {self.theta}")
        require_period(self.k)


def _events(t_from: Step, t_to: Step, k: int) -> Array:
    """Truncation events at steps in ``(t_from, t_to]``: the multiples of ``k`` there."""
    return np.floor_divide(t_to, k) - np.floor_divide(t_from, k)


def _gravity(n: Array, params: TGParams) -> Array:
    """The per-event shrinkage ``a = k eta_i l1``."""
    return params.k * adaptive_rate(n, params.alpha, params.beta) * params.l1


def expiry(state: Array, t: int, params: TGParams) -> Array:
    """The step of the ``ceil(|w| / a)``-th event after the last touch, if ``|w| <= theta``."""
    w, n, t_last = np.abs(state[:, 0]), state[:, 1], state[:, 2]
    a = _gravity(n, params)
    with np.errstate(divide="ignore", invalid="ignore"):
        needed = np.ceil(w / a)
    first_event = (np.floor_divide(t_last, params.k) + needed) * params.k
    estimate = np.where((a > 0) & (w <= params.theta), first_event, NEVER)
    return first_zero_step(RULE.weights, state, t, params, estimate)


@scalar
def _truncate_one(v: float, a: float, theta: float) -> float:
    """``T1(v, a, theta)``: shrink by ``a`` towards zero, but only where ``|v| <= theta``.

    >>> _truncate_one(-0.5, 0.1, 1.0), _truncate_one(0.05, 0.1, 1.0), _truncate_one(3.0, 0.1, 1.0)
    (-0.4, 0.0, 3.0)
    """
    return shrink(v, a) if abs(v) <= theta else v


@scalar
def _gravity_of(n: float, p: Array) -> float:
    """:func:`_gravity` of one ``n``: ``k eta_i l1``."""
    a: float = p[4] * rate(n, p[0], p[1]) * p[2]
    return a


@scalar
def weight_of(state: Array, i: int, t: float, p: Array) -> float:
    """Row ``i``'s weight after step ``t``: the stored one after the truncation events since
    its touch (:func:`_events` of one row, float floor division); ``p`` is alpha, beta, l1,
    theta, k.

    >>> float(weight_of(np.array([[0.2, 1.0, 2.0]]), 0, 4.0, np.array([0.5, 1.0, 0.1, 1.0, 2.0])))
    0.15000000000000002
    """
    k = p[4]
    events = t // k - state[i, 2] // k
    return _truncate_one(state[i, 0], events * _gravity_of(state[i, 1], p), p[3])


@scalar
def update_row(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """Row ``i``'s update, in place: catch up on events before ``t``, take the SGD step,
    truncate if ``t`` is a multiple of k."""
    w = weight_of(state, i, t - 1.0, p)
    n = state[i, 1] + g2
    v = w - rate(n, p[0], p[1]) * g
    if t % p[4] == 0.0:
        v = _truncate_one(v, _gravity_of(n, p), p[3])
    state[i, 0], state[i, 1], state[i, 2] = v, n, t


RULE = Rule(
    name="tg",
    title="Truncated gradient (Langford, Li & Zhang 2009), per-coordinate rates",
    fields=("w", "n", "t_last"),
    params_type=TGParams,
    expiry=expiry,
    rates=per_coordinate_rates,
    weight_of=weight_of,
    update_row=update_row,
)
