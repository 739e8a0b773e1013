"""L1-SGD: stochastic (sub)gradient descent on the loss plus ``l1 |w|``.

The naive baseline of seed 001 (L1 正则化法) and Langford, Li & Zhang 2009, section 3.1, with
per-coordinate rates ``eta_i = alpha / (beta + sqrt(n_i))``, on the coordinates of the
example only:

    w = w - eta (g + l1 sgn(w))

Its weights hover around zero but are rarely exactly zero, which is why the other rules exist.
Untouched weights do not change. State: ``w``, ``n``.

Uncertainty: FTRL's form with this rule's own rate, ``u(x) = sum_i x_i^2 eta_i`` with
``eta_i = alpha / (beta + sqrt(n_i))`` (the step also moves by ``eta_i l1`` towards zero).

>>> import numpy as np
>>> params = L1SGDParams(alpha=0.5, beta=1.0, l1=0.1)
>>> state = RULE.update(RULE.zeros(1), np.array([-1.0]), np.array([1.0]), 1, params)
>>> RULE.update(state, np.array([0.0]), np.array([0.0]), 2, params)
array([[0.225, 1.   ]])
"""

from __future__ import annotations

from dataclasses import dataclass

from online_ctr.learning.rules.base import (
    AdaptiveL1Params,
    Array,
    Rule,
    never_expires,
    per_coordinate_rates,
    rate,
    scalar,
    sign,
)


@dataclass(frozen=True)
class L1SGDParams(AdaptiveL1Params):
    """L1-SGD hyper-parameters: rates ``alpha``/``beta`` and the L1 ``l1``."""


@scalar
def weight_of(state: Array, i: int, t: float, p: Array) -> float:
    """Row ``i``'s stored weight."""
    w: float = state[i, 0]
    return w


@scalar
def update_row(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """One subgradient step on row ``i``, in place; ``p`` is alpha, beta, l1.

    >>> import numpy as np
    >>> state = np.array([[0.25, 1.0]])
    >>> update_row(state, 0, 0.0, 0.0, 2.0, np.array([0.5, 1.0, 0.1]))
    >>> state
    array([[0.225, 1.   ]])
    """
    w = state[i, 0]
    n = state[i, 1] + g2
    state[i, 0] = w - rate(n, p[0], p[1]) * (g + p[2] * sign(w))
    state[i, 1] = n


RULE = Rule(
    name="l1sgd",
    title="L1-SGD (seed 001), per-coordinate rates",
    fields=("w", "n"),
    params_type=L1SGDParams,
    expiry=never_expires,
    rates=per_coordinate_rates,
    weight_of=weight_of,
    update_row=update_row,
)
