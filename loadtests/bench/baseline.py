"""The baseline every model must beat: always predicting the running mean click rate, and the
test that keeps a broken model out of every ranking and ratio.

Before example ``t`` (counting from 0) the baseline predicts the clicks seen so far, smoothed
by half a click and half a non-click (the Krichevsky-Trofimov estimate, so the first
prediction is 0.5 and none is ever 0 or 1): ``p_t = (clicks before t + 1/2) / (t + 1)``. It is
scored before it sees the label, like every model here (progressive validation).

>>> round(running_mean_logloss([1, 0, 0, 1]), 6)
0.938354
>>> broken(0.60, 10, 0.55), broken(0.50, 0, 0.55), broken(0.50, 10, 0.55)
('worse than the mean', 'no nonzero weight', '')
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from online_ctr.learning.learner import log_loss

#: What a broken row says instead of a rank or a ratio.
WORSE = "worse than the mean"
EMPTY = "no nonzero weight"


def running_mean_probabilities(labels: Sequence[float] | np.ndarray) -> np.ndarray:
    """The baseline's prediction before each example: ``(clicks so far + 1/2) / (t + 1)``."""
    y = np.asarray(labels, dtype=np.float64)
    clicks_before = np.concatenate(([0.0], np.cumsum(y)[:-1]))
    return (clicks_before + 0.5) / (np.arange(len(y)) + 1.0)


def running_mean_logloss(labels: Sequence[float] | np.ndarray) -> float:
    """The baseline's progressive log loss (mean, nats) over ``labels`` in order."""
    y = np.asarray(labels, dtype=np.float64)
    if len(y) == 0:
        raise ValueError("no labels")
    return float(log_loss(running_mean_probabilities(y), y).mean())


def broken(logloss: float | None, nonzeros: int | None, mean_logloss: float) -> str:
    """Why a model must not be ranked (``""`` if it may be): no nonzero weight at all, or a
    progressive log loss no better than the running mean's on the same examples."""
    if nonzeros is not None and nonzeros == 0:
        return EMPTY
    if logloss is None or not np.isfinite(logloss) or logloss >= mean_logloss:
        return WORSE
    return ""
