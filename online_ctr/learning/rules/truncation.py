"""Simple truncation: SGD, and every ``k`` steps set to zero every weight with ``|w| <= theta``.

The baseline that truncated gradient improves on (Langford, Li & Zhang 2009, section 3.1;
seed 001, 简单截断法), with per-coordinate rates ``eta_i = alpha / (beta + sqrt(n_i))``:

    T0(v, theta) = 0 if |v| <= theta else v

``T0`` is idempotent, so an absent feature is zeroed by the first event after its last touch
if it is small enough, and otherwise never changes. State: ``w``, ``n``, ``t_last``.

Uncertainty: FTRL's form with this rule's own rate, ``u(x) = sum_i x_i^2 eta_i`` with
``eta_i = alpha / (beta + sqrt(n_i))``, the gradient step per unit gradient (a truncation event
can also zero a weight of at most ``theta``, which the bound does not count).

>>> params = TruncationParams(alpha=0.5, beta=1.0, theta=0.3, k=2)
>>> state = RULE.update(RULE.zeros(1), np.array([-1.0]), np.array([1.0]), 1, params)
>>> RULE.weights(state, 1, params), RULE.weights(state, 2, params)
(array([0.25]), array([0.]))
>>> expiry(state, 1, params)
array([2.])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from online_ctr.learning.rules.base import (
    NEVER,
    AdaptiveRateParams,
    Array,
    Rule,
    per_coordinate_rates,
    rate,
    require,
    require_period,
    scalar,
)


@dataclass(frozen=True)
class TruncationParams(AdaptiveRateParams):
    """Simple truncation: rates ``alpha``/``beta``, threshold ``theta``, period ``k``."""

    theta: float = 1e-3
    k: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.theta >= 0, f"theta must be >= 0, got {self.theta}")
        require_period(self.k)


def _next_event(t_last: Array, k: int) -> Array:
    """The first multiple of ``k`` after ``t_last``."""
    return (np.floor_divide(t_last, k) + 1) * k


def expiry(state: Array, t: int, params: TruncationParams) -> Array:
    """The first event after the last touch for small weights; never for the others.

    A small weight still nonzero at ``t`` has met no event since its touch, so that event is
    after ``t``.
    """
    w, t_last = state[:, 0], state[:, 2]
    return np.where(np.abs(w) <= params.theta, _next_event(t_last, params.k), NEVER)


@scalar
def weight_of(state: Array, i: int, t: float, p: Array) -> float:
    """Row ``i``'s weight after step ``t``: the stored one, or zero if an event since the last
    touch (:func:`_next_event` of one row) truncated it; ``p`` is alpha, beta, theta, k.

    >>> weight_of(np.array([[0.25, 1.0, 1.0]]), 0, 2.0, np.array([0.5, 1.0, 0.3, 2.0]))
    0.0
    """
    theta, k = p[2], p[3]
    w: float = state[i, 0]
    if (state[i, 2] // k + 1.0) * k <= t and abs(w) <= theta:
        return 0.0
    return w


@scalar
def update_row(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """Row ``i``'s update, in place: catch up on events before ``t``, take the SGD step,
    truncate (``T0``) if ``t`` is a multiple of k."""
    w = weight_of(state, i, t - 1.0, p)
    n = state[i, 1] + g2
    v = w - rate(n, p[0], p[1]) * g
    if t % p[3] == 0.0 and abs(v) <= p[2]:
        v = 0.0
    state[i, 0], state[i, 1], state[i, 2] = v, n, t


RULE = Rule(
    name="truncation",
    title="Simple truncation (Langford, Li & Zhang 2009), per-coordinate rates",
    fields=("w", "n", "t_last"),
    params_type=TruncationParams,
    expiry=expiry,
    rates=per_coordinate_rates,
    weight_of=weight_of,
    update_row=update_row,
)
