"""One summed-gradient mini-batch of logistic regression: predict with the weights at the
batch's start, then sum the log-loss gradients per feature and hand them to the rule.

Learning is sequential by default (:mod:`online_ctr.learning.sequential`, which computes the
same loss and gradient one example at a time, and which the Redis worker and ``online-ctr
replay`` both call, so they agree exactly); this mini-batch is the opt-in alternative
(``InMemoryModel(..., minibatch=True)``), and the scoring functions here also serve
predictions. The rules never see examples.

>>> from online_ctr.learning.features import FeatureHasher
>>> from online_ctr.learning.rules import get_rule
>>> rule = get_rule("ftrl")
>>> batch = FeatureHasher().batch([{"site": "news"}, {"site": "blog"}], labels=[1, 0])
>>> features = unique_features(batch)
>>> step = learn(rule, rule.params(), rule.zeros(len(features.ids)), 0, batch, features)
>>> step.probabilities
array([0.5, 0.5])
>>> step.counts.tolist()
[1.0, 2.0, 1.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import Batch
from online_ctr.learning.grouping import unique_inverse
from online_ctr.learning.jit import compiled
from online_ctr.learning.rules.base import Array, Rule
from online_ctr.learning.stream_metrics import log_loss

#: Logits are clipped here before the sigmoid: exp(35) is finite and 1 - sigmoid(35) ~ 6e-16
#: still separates from 1 in float64, so the log loss stays finite.
LOGIT_CLIP = 35.0


@dataclass(frozen=True)
class Features:
    """The distinct feature ids of a batch (sorted) and, per stored pair, its index among them."""

    ids: NDArray[np.uint64]
    inverse: NDArray[np.intp]


@dataclass(frozen=True)
class Scored:
    """A mini-batch scored at its start: predictions, per-example loss, and the per-feature
    gradient sums and occurrence counts the update needs."""

    logits: Array
    probabilities: Array
    losses: Array
    g: Array
    g2: Array
    counts: Array


@dataclass(frozen=True)
class LearnedBatch(Scored):
    """A scored mini-batch and the state after applying it."""

    state: Array


def unique_features(batch: Batch) -> Features:
    """Group a batch's feature occurrences by id."""
    ids, inverse = unique_inverse(batch.ids)
    return Features(ids=ids, inverse=inverse)


def scoring_features(batch: Batch) -> Features:
    """:func:`unique_features` with the distinct ids in no particular order: for scoring, and
    for learning where each id's row is found by the id (an in-process model's table)."""
    ids, inverse = batch.distinct
    return Features(ids=ids, inverse=inverse)


def sigmoid(s: Array) -> Array:
    """``1 / (1 + exp(-s))`` on logits clipped to ``[-LOGIT_CLIP, LOGIT_CLIP]``."""
    # np.clip's result by its two ufuncs (NaN stays NaN), without its Python wrapper's checks.
    return 1.0 / (1.0 + np.exp(-np.minimum(np.maximum(s, -LOGIT_CLIP), LOGIT_CLIP)))


def logits(batch: Batch, features: Features, w: Array) -> Array:
    """``sum_i w_i x_i`` per example, for the distinct features' weights ``w``."""
    return _example_sums(batch.indptr, w, features.inverse, batch.values, 0.0)[0]


def scores(batch: Batch, features: Features, w: Array, offset: float) -> tuple[Array, Array]:
    """The logits plus ``offset`` (where it is not 0) and their probabilities: what
    ``s = logits(...); s += offset; sigmoid(s)`` gives, every bit, in fewer calls (the clip
    and negation in the compiled sum, then numpy's exp, as :func:`sigmoid` takes it)."""
    s, z = _example_sums(batch.indptr, w, features.inverse, batch.values, offset)
    np.exp(z, out=z)
    z += 1.0
    return s, np.divide(1.0, z, out=z)


@compiled
def _example_sums(
    indptr: NDArray[np.int64], w: Array, inverse: NDArray[np.intp], x: Array, offset: float
) -> tuple[Array, Array]:
    """Per example ``j``, ``w[inverse[k]] * x[k]`` summed over its pairs ``k`` in order from
    0.0, then ``offset`` added unless it is 0: what ``_sum_by(batch.rows(), w[inverse] * x,
    examples)`` gives, every bit (bincount adds each pair to its example's total in that same
    order), in one pass instead of five numpy calls, whose fixed costs were most of scoring a
    single ``/predict``. And each sum clipped to ``[-LOGIT_CLIP, LOGIT_CLIP]`` and negated,
    as :func:`sigmoid` does before its exp (exact operations, NaN kept)."""
    examples = len(indptr) - 1
    out = np.zeros(examples)
    negated = np.empty(examples)
    for j in range(examples):
        s = 0.0
        for k in range(indptr[j], indptr[j + 1]):
            s += w[inverse[k]] * x[k]
        if offset != 0.0:
            s += offset
        out[j] = s
        # NaN stays NaN: max and min keep their first argument unless another beats it.
        negated[j] = -min(max(s, -LOGIT_CLIP), LOGIT_CLIP)
    return out, negated


def warm_up() -> None:
    """Load the compiled scoring sum (numba's cache) or compile it now, not in a first
    ``/predict``."""
    _example_sums(np.array([0, 1]), np.zeros(1), np.zeros(1, np.intp), np.ones(1), 0.0)


def gradients(batch: Batch, features: Features, p: Array) -> tuple[Array, Array]:
    """Per distinct feature: the batch's sum of ``w (p - y) x`` and sum of its squares, ``w``
    each example's importance weight."""
    g = batch.weighted(p - batch.labels)[batch.rows()] * batch.values
    k = len(features.ids)
    return _sum_by(features.inverse, g, k), _sum_by(features.inverse, g * g, k)


def _sum_by(groups: NDArray[np.intp] | NDArray[np.int64], x: Array, size: int) -> Array:
    """``out[j] = sum of x[groups == j]``, for ``j < size``."""
    return np.asarray(np.bincount(groups, weights=x, minlength=size), dtype=np.float64)


def score(
    rule: Rule,
    params: Any,
    state: Array,
    t: int,
    batch: Batch,
    features: Features,
    offset: float = 0.0,
) -> Scored:
    """Predict the batch with ``state`` (the rule's fields for ``features.ids``) as at step ``t``
    and sum the gradients per feature; ``offset`` (a base-rate prior's) is added to each logit."""
    s, p = scores(batch, features, rule.weights(state, t, params), offset)
    g, g2 = gradients(batch, features, p)
    counts = np.bincount(features.inverse, minlength=len(features.ids)).astype(np.float64)
    return Scored(s, p, log_loss(p, batch.labels), g, g2, counts)


def learn(
    rule: Rule,
    params: Any,
    state: Array,
    t: int,
    batch: Batch,
    features: Features,
    offset: float = 0.0,
) -> LearnedBatch:
    """Score the batch at step ``t`` (``offset`` added to each logit), then apply it as steps
    ``t+1..t+B``."""
    scored = score(rule, params, state, t, batch, features, offset)
    new_state = rule.update(state, scored.g, scored.g2, t + len(batch), params)
    return LearnedBatch(**vars(scored), state=new_state)
