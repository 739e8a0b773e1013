"""L1-RDA: regularized dual averaging with an L1 term.

Xiao, "Dual Averaging Methods for Regularized Stochastic Learning and Online Optimization",
JMLR 2010, with the seed's choice ``beta_t = gamma sqrt(t)`` and ``h(w) = ||w||^2 / 2``.
State per feature: ``z``, the sum of all its past gradients (absent rounds add 0). With the
average gradient ``gbar = z / t``:

    w = 0                                      if |gbar| <= l1
    w = -(sqrt(t) / gamma) (gbar - l1 sgn(gbar)) otherwise

The threshold is on the *average* gradient and does not decay, so RDA is the sparsest of the
family; and since ``t`` grows on every example, an untouched weight can still become zero.

Uncertainty: RDA has no per-coordinate rate; the analogue of FTRL's ``eta_i`` is how far the
next update (step ``t + 1``) moves a weight per unit of gradient, ``1 / (gamma sqrt(t + 1))``
(``z`` gains ``g``, divided by ``gamma sqrt(t + 1)``; the soft threshold only shrinks that),
the same for every feature.

>>> params = RDAParams(l1=0.1, gamma=1.0)
>>> state = RULE.update(RULE.zeros(2), np.array([-3.0, 0.5]), np.array([9.0, 0.25]), 4, params)
>>> RULE.weights(state, 4, params)
array([ 1.3 , -0.05])
>>> expiry(state, 4, params)
array([30.,  5.])
>>> rates(state, 3, params)  # 1 / (gamma sqrt(4))
array([0.5, 0.5])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from online_ctr.learning.rules.base import (
    NEVER,
    Array,
    Rule,
    first_zero_step,
    require,
    scalar,
    sign,
)


@dataclass(frozen=True)
class RDAParams:
    """L1-RDA hyper-parameters: ``l1`` is Xiao's lambda, ``gamma`` scales ``beta_t``."""

    l1: float = 0.01
    gamma: float = 1.0

    def __post_init__(self) -> None:
        require(self.l1 >= 0, f"l1 must be >= 0, got {self.l1}")
        require(self.gamma > 0, f"gamma must be > 0, got {self.gamma}")


def expiry(state: Array, t: int, params: RDAParams) -> Array:
    """First step at which ``|z| / s <= l1``, that is ``s >= |z| / l1``."""
    z = np.abs(state[:, 0])
    estimate = z / params.l1 if params.l1 > 0 else np.full(z.shape, NEVER)
    return first_zero_step(RULE.weights, state, t, params, estimate)


def rates(state: Array, t: int, params: RDAParams) -> Array:
    """``1 / (gamma sqrt(t + 1))`` for every feature: the next update's step per unit gradient."""
    return np.full(state.shape[0], 1.0 / (params.gamma * np.sqrt(t + 1.0)))


@scalar
def weight_of(state: Array, i: int, t: float, p: Array) -> float:
    """Row ``i``'s weight: the closed-form argmin of ``gbar w + l1 |w| + gamma / (2 sqrt(t))
    w^2``, 0 before any data; ``p`` is l1, gamma.

    >>> float(weight_of(np.array([[-6.0]]), 0, 4.0, np.array([0.1, 1.0])))
    2.8
    """
    l1, gamma = p[0], p[1]
    steps = max(t, 1.0)
    gbar = state[i, 0] / steps
    if abs(gbar) <= l1 or t == 0.0:
        return 0.0
    w: float = -(math.sqrt(steps) / gamma) * (gbar - l1 * sign(gbar))
    return w


@scalar
def update_row(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """Row ``i``'s update, in place: ``z`` sums the gradients; the step count enters only
    through the weight."""
    state[i, 0] += g


RULE = Rule(
    name="rda",
    title="L1-RDA (Xiao 2010)",
    fields=("z",),
    params_type=RDAParams,
    expiry=expiry,
    rates=rates,
    weight_of=weight_of,
    update_row=update_row,
)
