"""Exact sequential learning: each example is scored with the weights left by the one before it.

This is the learning the docs define (``docs/algorithms.md``): example ``j`` of a batch that
starts after ``t`` examples is predicted with the weights as at step ``t + j``, then each of its
features gets ``g = (p - y) x`` and ``g2 = g^2`` as step ``t + j + 1``; an example of importance
weight ``w`` (``Batch.weights``) gives ``g = w (p - y) x``, its log-loss gradient counted ``w``
times (McMahan et al. 2013, section 4.4). A batch is only a unit
of reading and committing state, so the result is the same at every batch size. The summed-
gradient mini-batch of :func:`online_ctr.learning.learner.learn` is the different, opt-in algorithm.

The per-example loop runs compiled, with numba (:mod:`online_ctr.learning.kernels`): numpy cannot
vectorize it, since every example depends on the state the previous one left, and a Python loop
over features costs about a microsecond each. Compilation happens on the first call, never at
import, and is cached on disk.

>>> from online_ctr.learning.features import FeatureHasher
>>> from online_ctr.learning.learner import learn, unique_features
>>> from online_ctr.learning.rules import get_rule
>>> rule = get_rule("ftrl")
>>> params = rule.params(alpha=0.1, beta=1.0, l1=0.0, l2=0.0)
>>> batch = FeatureHasher().batch([{"site": "news"}] * 2, labels=[1, 1])
>>> features = unique_features(batch)
>>> learned = learn_sequential(rule, params, rule.zeros(2), 0, batch, features)

With ``l1 = l2 = 0`` FTRL is SGD with rate ``alpha / (beta + sqrt(n))``: the first example
(p = 0.5) gives both features ``g = -0.5``, so ``w = 0.1 / 1.5 * 0.5`` each, and the second
example is scored with ``s = 2 w = 1 / 15``. The mini-batch scores both at the start.

>>> import math
>>> learned.probabilities.tolist() == [0.5, 1 / (1 + math.exp(-1 / 15))]
True
>>> learn(rule, params, rule.zeros(2), 0, batch, features).probabilities.tolist()
[0.5, 0.5]
>>> y = 1.0
>>> g = [0.5 - y, learned.probabilities[1] - y]  # per feature, (p - y) x with x = 1
>>> learned.state[:, 1].tolist() == [g[0] * g[0] + g[1] * g[1]] * 2  # n sums g^2
True
>>> learned.counts.tolist()
[2.0, 2.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from online_ctr.learning import grouping, kernels, learner, retention, table
from online_ctr.learning.admission import Admitting, admit_all
from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.compact import check_encoding
from online_ctr.learning.features import Batch
from online_ctr.learning.learner import LOGIT_CLIP, Features
from online_ctr.learning.retention import Retaining, retain_all
from online_ctr.learning.rules.base import Array, Rule
from online_ctr.learning.stream_metrics import log_loss

__all__ = ["Learned", "learn_sequential"]

#: The kernel's base-rate argument of a model without a prior (``BaseRate("off")``).
_NO_PRIOR = BaseRate("off").kernel(BaseRate("off").start())


@dataclass(frozen=True)
class Learned:
    """A batch learned example by example: per example the logit (unclipped), probability and
    log loss, all predicted before learning it; the state after the batch, and how many times
    each feature occurred in it."""

    logits: Array
    probabilities: Array
    losses: Array
    state: Array
    counts: Array


def learn_sequential(
    rule: Rule,
    params: Any,
    state: Array,
    t: int,
    batch: Batch,
    features: Features,
    encoding: str = "float64",
    admission: Admitting | None = None,
    retaining: Retaining | None = None,
    base: Array | None = None,
) -> Learned:
    """Learn ``batch`` one example at a time, starting from ``state`` (the rule's fields for
    ``features.ids``) as at step ``t``; ``state`` itself is left as it was. With the
    ``compact`` ``encoding`` each update is rounded to what that encoding stores
    (:mod:`online_ctr.learning.compact`). ``admission`` (:func:`kernels.learner`'s argument,
    its arrays per ``features``) says which features are admitted and how more are; its
    arrays are updated in place. None: every feature is admitted. ``retaining``
    (:mod:`online_ctr.learning.retention`): with an ``expire_after`` or a budget
    (:mod:`online_ctr.learning.eviction`), ``state`` has one more column, each feature's last
    step (0: not stored), which the learner keeps; its count of features found expired is added
    to, and the budget's counts updated in place. None: nothing expires. ``base``
    (:meth:`online_ctr.learning.base_rate.BaseRate.kernel`): the base-rate prior added to each
    logit, its counts updated in place. None: no prior."""
    check_encoding(encoding, rule.name)
    retaining = retain_all() if retaining is None else retaining
    retention.check_encoding(retaining.expire_after, encoding)
    budget = retaining.budget.max_features
    retention.check_encoding(budget, encoding, ("max_features", "the encoding"))
    p = rule.kernel_params(params)
    new_state = np.array(state, dtype=np.float64, order="C")  # a copy: the kernel writes it
    _check_shapes(rule, new_state, batch, features, retaining.stepped())
    if base is not None and (base.shape != (4,) or base.dtype != np.float64):
        raise ValueError(f"base must be 4 float64 values (on, d, c, m), got {base!r}")
    labels = np.ascontiguousarray(batch.labels, dtype=np.float64)
    logits, probabilities = kernels.learner(rule)(
        p,
        new_state,
        int(t),  # a float or numpy step would compile another specialization
        LOGIT_CLIP,
        np.ascontiguousarray(batch.indptr, dtype=np.int64),
        np.ascontiguousarray(features.inverse, dtype=np.intp),
        np.ascontiguousarray(batch.values, dtype=np.float64),
        labels,
        np.ascontiguousarray(batch.example_weights(), dtype=np.float64),
        np.ascontiguousarray(features.ids, dtype=np.uint64),
        encoding == "compact",
        admit_all() if admission is None else admission,
        retaining,
        _NO_PRIOR.copy() if base is None else base,
    )
    counts = np.bincount(features.inverse, minlength=len(features.ids)).astype(np.float64)
    return Learned(logits, probabilities, log_loss(probabilities, labels), new_state, counts)


def _check_shapes(
    rule: Rule, state: Array, batch: Batch, features: Features, stepped: bool
) -> None:
    """Refuse inputs that do not fit together: the compiled loop does not check its indices.
    ``stepped``: the state has a step column after the rule's fields."""
    k = len(features.ids)
    pairs = batch.occurrences()
    width = len(rule.fields) + stepped
    if state.shape != (k, width):
        raise ValueError(f"state has shape {state.shape}, expected {(k, width)}")
    if not len(batch.ids) == len(batch.values) == len(features.inverse) == pairs:
        raise ValueError("batch ids, values and features.inverse must have one entry per pair")
    if batch.indptr[0] != 0 or np.any(np.diff(batch.indptr) < 0):
        raise ValueError("batch.indptr must start at 0 and never decrease")
    if len(batch.labels) != len(batch):
        raise ValueError(f"{len(batch)} examples but {len(batch.labels)} labels")
    if batch.weights is not None and len(batch.weights) != len(batch):
        raise ValueError(f"{len(batch)} examples but {len(batch.weights)} weights")
    if batch.weights is not None and not (np.isfinite(batch.weights) & (batch.weights > 0)).all():
        raise ValueError("importance weights must be finite and above 0")
    if pairs and not 0 <= features.inverse.min() <= features.inverse.max() < k:
        raise ValueError("features.inverse points outside the features")


def warm_up(rule: Rule, params: Any) -> None:
    """Compile (or load from numba's cache) the kernel now, on one throwaway example, so the
    first real batch does not pay for it (a worker calls this before it takes the lease)."""
    grouping.warm_up()
    learner.warm_up()  # the scoring sum: predictions, and the mini-batch learner
    table.warm_up()  # the worker's cache and the in-process model look features up in it
    warm_up_loop(rule, params)
    rule.update(rule.zeros(1), np.zeros(1), np.zeros(1), 1, params)  # its array math too
    rule.weights(rule.zeros(1), 1, params)


def warm_up_loop(rule: Rule, params: Any) -> None:
    """Compile (or load from numba's cache) the rule's per-example loop alone."""
    batch = Batch(np.array([0, 1]), np.zeros(1, np.uint64), np.ones(1), np.zeros(1))
    learn_sequential(
        rule, params, rule.zeros(1), 0, batch, Features(batch.ids, np.zeros(1, np.intp))
    )
