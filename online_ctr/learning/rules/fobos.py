"""L1-FOBOS: forward-backward splitting with a soft threshold, applied lazily.

Duchi & Singer, "Efficient Online and Batch Learning using Forward Backward Splitting",
JMLR 2009, with per-coordinate rates ``eta_i = alpha / (beta + sqrt(n_i))`` as in McMahan's
comparison (AISTATS 2011). Every round applies to every coordinate

    v = w - eta g;   w = sgn(v) max(0, |v| - eta l1)

and a round without the feature has ``g = 0``. Thresholds compose additively and ``eta_i``
is constant between touches, so the ``r`` rounds a feature missed shrink it by
``S_(r eta_i l1)`` all at once on its next touch. State per feature: ``w`` as of its last
touch, ``n`` and ``t_last`` (the step of that touch). A mini-batch ending at step ``t`` is one
touch at ``t``.

Uncertainty: FTRL's form with this rule's own rate, ``u(x) = sum_i x_i^2 eta_i`` with
``eta_i = alpha / (beta + sqrt(n_i))``, the size of the forward step per unit gradient (the
soft threshold only shrinks a weight further).

>>> params = FOBOSParams(alpha=0.5, beta=1.0, l1=0.1)
>>> state = RULE.update(RULE.zeros(1), np.array([-1.0]), np.array([1.0]), 1, params)
>>> state
array([[0.225, 1.   , 1.   ]])
>>> RULE.weights(state, 3, params)
array([0.175])
>>> expiry(state, 1, params)
array([10.])
"""

from __future__ import annotations

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
    scalar,
    shrink,
)


@dataclass(frozen=True)
class FOBOSParams(AdaptiveL1Params):
    """L1-FOBOS hyper-parameters: per-coordinate rate ``alpha``, ``beta`` and the L1 ``l1``."""


def _pending_penalty(state: Array, rounds: Step, params: FOBOSParams) -> Array:
    """Total threshold of ``rounds`` rounds without the feature: ``rounds * eta_i * l1``."""
    n = state[:, 1]
    return rounds * (adaptive_rate(n, params.alpha, params.beta) * params.l1)


def expiry(state: Array, t: int, params: FOBOSParams) -> Array:
    """Solve ``(s - t_last) eta_i l1 = |w|`` for ``s``, then settle the rounding."""
    per_round = _pending_penalty(state, 1.0, params)
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = state[:, 2] + np.abs(state[:, 0]) / per_round
    estimate = np.where(per_round > 0, estimate, NEVER)
    return first_zero_step(RULE.weights, state, t, params, estimate)


@scalar
def weight_of(state: Array, i: int, t: float, p: Array) -> float:
    """Row ``i``'s weight after step ``t``: the stored one shrunk by the rounds since its last
    touch (:func:`_pending_penalty` of one row); ``p`` is alpha, beta, l1.

    >>> float(weight_of(np.array([[0.225, 1.0, 1.0]]), 0, 3.0, np.array([0.5, 1.0, 0.1])))
    0.175
    """
    alpha, beta, l1 = p[0], p[1], p[2]
    penalty = (t - state[i, 2]) * (rate(state[i, 1], alpha, beta) * l1)
    return shrink(state[i, 0], penalty)


@scalar
def update_row(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """Row ``i``'s update, in place: catch up on the rounds missed before ``t``, then one
    forward and one backward step."""
    alpha, beta, l1 = p[0], p[1], p[2]
    w = weight_of(state, i, t - 1.0, p)
    n = state[i, 1] + g2
    eta = rate(n, alpha, beta)
    state[i, 0] = shrink(w - eta * g, eta * l1)
    state[i, 1] = n
    state[i, 2] = t


RULE = Rule(
    name="fobos",
    title="L1-FOBOS (Duchi & Singer 2009), per-coordinate rates",
    fields=("w", "n", "t_last"),
    params_type=FOBOSParams,
    expiry=expiry,
    rates=per_coordinate_rates,
    weight_of=weight_of,
    update_row=update_row,
)
