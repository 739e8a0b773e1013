"""Each rule's math on arrays in numpy, as the rules were first written: the oracle the compiled
array forms (``Rule.weights``, ``Rule.update``, built from each rule's row math by
:func:`online_ctr.learning.kernels.row_math`) must equal bit for bit.

The same float operations in the same order as the row math: ``np.sqrt`` and ``math.sqrt`` are
both correctly rounded, and no rule calls ``exp``; numpy's ``sign``, ``maximum``, ``where`` and
``floor_divide`` are the row math's comparisons written out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from online_ctr.learning.rules.base import Array, Step, adaptive_rate
from online_ctr.learning.rules.fobos import FOBOSParams
from online_ctr.learning.rules.ftrl import FTRLParams
from online_ctr.learning.rules.l1sgd import L1SGDParams
from online_ctr.learning.rules.rda import RDAParams
from online_ctr.learning.rules.tg import TGParams
from online_ctr.learning.rules.truncation import TruncationParams

WeightsFn = Callable[[Array, Step, Any], Array]
UpdateFn = Callable[[Array, Array, Array, int, Any], Array]


def soft_threshold(v: Array, a: Step) -> Array:
    """``S_a(v) = sgn(v) max(0, |v| - a)``, the proximal map of ``a |v|``.

    >>> soft_threshold(np.array([-3.0, 0.5, 2.0]), 1.0)
    array([-2.,  0.,  1.])
    """
    return np.sign(v) * np.maximum(0.0, np.abs(v) - a)


def ftrl_weights(state: Array, t: Step, params: FTRLParams) -> Array:
    """Closed-form argmin of ``z w + l1 |w| + (l2 + (beta + sqrt(n)) / alpha) w^2 / 2``."""
    z, n = state[:, 0], state[:, 1]
    shrunk = z - np.sign(z) * params.l1
    # With beta = l2 = 0 a feature with n = 0 divides 0 by 0; its z is 0 then, so it is masked.
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -shrunk / ((params.beta + np.sqrt(n)) / params.alpha + params.l2)
    return np.where(np.abs(z) <= params.l1, 0.0, w)


def ftrl_update(state: Array, g: Array, g2: Array, t: int, params: FTRLParams) -> Array:
    """Algorithm 1's per-coordinate update, with ``g2`` the sum of squared gradients."""
    z, n = state[:, 0], state[:, 1]
    sigma = (np.sqrt(n + g2) - np.sqrt(n)) / params.alpha
    return np.column_stack((z + g - sigma * ftrl_weights(state, t, params), n + g2))


def rda_weights(state: Array, t: Step, params: RDAParams) -> Array:
    """Closed-form argmin of ``gbar w + l1 |w| + gamma / (2 sqrt(t)) w^2``; 0 before any data."""
    z = state[:, 0]
    steps = np.maximum(np.asarray(t, dtype=np.float64), 1.0)
    gbar = z / steps
    w = -(np.sqrt(steps) / params.gamma) * (gbar - params.l1 * np.sign(gbar))
    return np.where((np.abs(gbar) <= params.l1) | (np.asarray(t) == 0), 0.0, w)


def rda_update(state: Array, g: Array, g2: Array, t: int, params: RDAParams) -> Array:
    """Add the batch's gradient sum to ``z``; the step count enters only through the weights."""
    return np.column_stack((state[:, 0] + g,))


def fobos_weights(state: Array, t: Step, params: FOBOSParams) -> Array:
    """The weight after step ``t``: the stored one shrunk by the rounds since its last touch."""
    w, n, t_last = state[:, 0], state[:, 1], state[:, 2]
    rounds = np.asarray(t) - t_last
    return soft_threshold(w, rounds * (adaptive_rate(n, params.alpha, params.beta) * params.l1))


def fobos_update(state: Array, g: Array, g2: Array, t: int, params: FOBOSParams) -> Array:
    """Catch up on the rounds missed before ``t``, then one forward and one backward step."""
    w = fobos_weights(state, t - 1, params)
    n = state[:, 1] + g2
    eta = adaptive_rate(n, params.alpha, params.beta)
    w = soft_threshold(w - eta * g, eta * params.l1)
    return np.column_stack((w, n, np.full(w.shape, float(t))))


def tg_truncate(v: Array, a: Array | float, theta: float) -> Array:
    """``T1(v, a, theta)``: shrink by ``a`` towards zero, but only where ``|v| <= theta``."""
    return np.where(np.abs(v) <= theta, soft_threshold(v, a), v)


def _tg_gravity(n: Array, params: TGParams) -> Array:
    return params.k * adaptive_rate(n, params.alpha, params.beta) * params.l1


def tg_weights(state: Array, t: Step, params: TGParams) -> Array:
    """The weight after step ``t``: the stored one after the truncation events since its touch."""
    w, n, t_last = state[:, 0], state[:, 1], state[:, 2]
    events = np.floor_divide(np.asarray(t, dtype=np.float64), params.k)
    m = events - np.floor_divide(t_last, params.k)
    return tg_truncate(w, m * _tg_gravity(n, params), params.theta)


def tg_update(state: Array, g: Array, g2: Array, t: int, params: TGParams) -> Array:
    """Catch up on events before ``t``, take the SGD step, truncate if ``t`` is a multiple of k."""
    w = tg_weights(state, t - 1, params)
    n = state[:, 1] + g2
    v = w - adaptive_rate(n, params.alpha, params.beta) * g
    if t % params.k == 0:
        v = tg_truncate(v, _tg_gravity(n, params), params.theta)
    return np.column_stack((v, n, np.full(v.shape, float(t))))


def truncation_weights(state: Array, t: Step, params: TruncationParams) -> Array:
    """The stored weight, or zero if an event since the last touch truncated it."""
    w, t_last = state[:, 0], state[:, 2]
    next_event = (np.floor_divide(t_last, params.k) + 1) * params.k
    truncated = (next_event <= np.asarray(t)) & (np.abs(w) <= params.theta)
    return np.where(truncated, 0.0, w)


def truncation_update(state: Array, g: Array, g2: Array, t: int, params: TruncationParams) -> Array:
    """Catch up on events before ``t``, take the SGD step, truncate if ``t`` is a multiple of k."""
    w = truncation_weights(state, t - 1, params)
    n = state[:, 1] + g2
    v = w - adaptive_rate(n, params.alpha, params.beta) * g
    if t % params.k == 0:
        v = np.where(np.abs(v) <= params.theta, 0.0, v)
    return np.column_stack((v, n, np.full(v.shape, float(t))))


def l1sgd_weights(state: Array, t: Step, params: L1SGDParams) -> Array:
    """The stored weight."""
    return state[:, 0].copy()


def l1sgd_update(state: Array, g: Array, g2: Array, t: int, params: L1SGDParams) -> Array:
    """One subgradient step on the features present."""
    w = state[:, 0]
    n = state[:, 1] + g2
    w = w - adaptive_rate(n, params.alpha, params.beta) * (g + params.l1 * np.sign(w))
    return np.column_stack((w, n))


#: Per rule name, its numpy ``weights(state, t, params)`` and ``update(state, g, g2, t, params)``.
ORACLES: dict[str, tuple[WeightsFn, UpdateFn]] = {
    "ftrl": (ftrl_weights, ftrl_update),
    "rda": (rda_weights, rda_update),
    "fobos": (fobos_weights, fobos_update),
    "tg": (tg_weights, tg_update),
    "truncation": (truncation_weights, truncation_update),
    "l1sgd": (l1sgd_weights, l1sgd_update),
}
