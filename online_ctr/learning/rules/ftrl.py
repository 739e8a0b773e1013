"""FTRL-Proximal with per-coordinate learning rates.

McMahan et al., "Ad Click Prediction: a View from the Trenches", KDD 2013, Algorithm 1.
State per feature: ``z`` and ``n``; the weight is never stored, it is a function of them:

    w = 0                                                  if |z| <= l1
    w = -(z - sgn(z) l1) / ((beta + sqrt(n)) / alpha + l2) otherwise

and a gradient ``g`` updates ``sigma = (sqrt(n + g^2) - sqrt(n)) / alpha``,
``z += g - sigma w``, ``n += g^2``. Both updates are additions.

Uncertainty (the paper's section 6): ``u(x) = sum_i x_i^2 eta_i`` with the per-coordinate
rate ``eta_i = alpha / (beta + sqrt(n_i))``, a bound on how far the next update can move the
logit (exact for ``l1 = l2 = 0``, where FTRL is SGD with a rate at most ``eta_i``). The paper
writes it for binary features and ``beta = 0``, ``u(x) = alpha sum_i |x_i| / sqrt(n_i)``;
with ``beta > 0`` this is the rate the rule actually steps with. A never-seen feature with
``beta = 0`` has ``eta = alpha``: its first update moves its weight by exactly ``alpha``.

>>> params = FTRLParams(alpha=0.1, beta=1.0, l1=1.0, l2=1.0)
>>> state = RULE.update(RULE.zeros(2), np.array([-3.0, 0.5]), np.array([9.0, 0.25]), 1, params)
>>> state
array([[-3.  ,  9.  ],
       [ 0.5 ,  0.25]])
>>> RULE.weights(state, 1, params)
array([0.04878049, 0.        ])
>>> rates(state, 1, params)  # alpha / (beta + sqrt(n))
array([0.025     , 0.06666667])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from online_ctr.learning.rules.base import (
    Array,
    Rule,
    adaptive_rate,
    never_expires,
    require,
    scalar,
    sign,
)


@dataclass(frozen=True)
class FTRLParams:
    """FTRL-Proximal hyper-parameters, named as in the paper."""

    alpha: float = 0.1
    beta: float = 1.0
    l1: float = 1.0
    l2: float = 1.0

    def __post_init__(self) -> None:
        require(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        require(self.beta >= 0, f"beta must be >= 0, got {self.beta}")
        require(self.l1 >= 0, f"l1 must be >= 0, got {self.l1}")
        require(self.l2 >= 0, f"l2 must be >= 0, got {self.l2}")


def rates(state: Array, t: int, params: FTRLParams) -> Array:
    """``alpha / (beta + sqrt(n))``; ``alpha`` where that divides by zero (``beta = n = 0``)."""
    n = state[:, 1]
    with np.errstate(divide="ignore"):
        eta = adaptive_rate(n, params.alpha, params.beta)
    return np.where(params.beta + np.sqrt(n) > 0, eta, params.alpha)


@scalar
def weight_of(state: Array, i: int, t: float, p: Array) -> float:
    """Row ``i``'s weight: the closed-form argmin of ``z w + l1 |w| + (l2 + (beta + sqrt(n)) /
    alpha) w^2 / 2``; ``p`` is alpha, beta, l1, l2. With beta = l2 = 0 a feature with n = 0
    would divide 0 by 0; its z is 0 then, so it is answered before.

    >>> float(weight_of(np.array([[-3.0, 9.0]]), 0, 1.0, np.array([0.1, 1.0, 1.0, 1.0])))
    0.04878048780487805
    """
    alpha, beta, l1, l2 = p[0], p[1], p[2], p[3]
    z, n = state[i, 0], state[i, 1]
    if abs(z) <= l1:
        return 0.0
    w: float = -(z - sign(z) * l1) / ((beta + math.sqrt(n)) / alpha + l2)
    return w


@scalar
def update_row(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """Algorithm 1's per-coordinate update of row ``i``, in place, with ``g2`` the sum of
    squared gradients."""
    z, n = state[i, 0], state[i, 1]
    w = weight_of(state, i, t, p)
    sigma = (math.sqrt(n + g2) - math.sqrt(n)) / p[0]
    state[i, 0] = z + g - sigma * w
    state[i, 1] = n + g2


RULE = Rule(
    name="ftrl",
    title="FTRL-Proximal (McMahan et al. 2013)",
    fields=("z", "n"),
    params_type=FTRLParams,
    expiry=never_expires,
    rates=rates,
    weight_of=weight_of,
    update_row=update_row,
)
