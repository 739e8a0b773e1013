"""Seeding an online rule's state from batch weights: the warm start ``train-batch --out`` writes.

Given the OWL-QN optimum ``w`` (fitted on ``N`` examples) and each feature's sum of squared
gradients over those examples at ``w``, ``g2_i = sum_e ((p_e - y_e) x_ei)^2``, each rule gets a
state whose ``weights()`` are ``w`` (up to float rounding), at the step ``t`` :func:`seed_step`
gives:

- FTRL (``z``, ``n``): ``n = g2``, the sum of squared gradients FTRL itself accumulates, so the
  learning rates continue as if it had learned the batch rather than restarting at
  ``alpha / beta``; then ``z`` solves the closed form ``w = -(z - sgn(z) l1) / d`` with
  ``d = (beta + sqrt(n)) / alpha + l2``: ``z = -(w d + sgn(w) l1)`` (0 where ``w = 0``). At
  ``t = 0``: FTRL's weights do not depend on ``t``.
- L1-RDA (``z``, the gradient sum): its weight is ``-(sqrt(t) / gamma)(z / t - l1 sgn(z))``,
  which needs ``t >= 1``; ``t = N`` (the batch's examples) and ``z = -t (w gamma / sqrt(t) +
  sgn(w) l1)``.
- FOBOS, truncated gradient, simple truncation (``w``, ``n``, ``t_last``): ``w``, ``n = g2``
  and ``t_last = t = 0``, so no lazy shrinking is pending; L1-SGD (``w``, ``n``): ``w``, ``g2``.

The online model's base-rate prior (:mod:`online_ctr.learning.base_rate`, ``mean`` unless
asked otherwise) starts from the batch's counts, its clicks over its ``N`` examples, and the
bias's weight gives up what the prior adds: ``w_bias - prior``, so that the seeded model
predicts as the batch model (up to float rounding).

>>> from online_ctr.learning.rules import get_rule
>>> rule = get_rule("ftrl")
>>> params = rule.params(alpha=0.1, beta=1.0, l1=1.0, l2=1.0)
>>> w = np.array([0.5, 0.0, -2.0])
>>> state = seed_state(rule, params, w, np.array([4.0, 1.0, 0.0]), seed_step(rule, 10))
>>> rule.weights(state, 0, params).tolist()
[0.5, 0.0, -2.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from online_ctr.learning.base_rate import MEAN, BaseRate
from online_ctr.learning.features import bias_id
from online_ctr.learning.owlqn import Design
from online_ctr.learning.rules.base import Array, Rule
from online_ctr.learning.snapshot import Footer, Header
from online_ctr.learning.snapshot_writer import Writer


def seed_step(rule: Rule, examples: int) -> int:
    """The step a seeded model starts at: ``examples`` for RDA (its weights need ``t >= 1``),
    0 for every other rule."""
    return max(1, examples) if rule.name == "rda" else 0


def seed_state(rule: Rule, params: Any, w: Array, g2: Array, t: int) -> Array:
    """The state rows of ``rule`` whose weights at step ``t`` are ``w`` (see the module doc)."""
    w = np.asarray(w, dtype=np.float64)
    g2 = np.asarray(g2, dtype=np.float64)
    if rule.name == "ftrl":
        d = (params.beta + np.sqrt(g2)) / params.alpha + params.l2
        z = np.where(w == 0, 0.0, -(w * d + np.sign(w) * params.l1))
        return np.column_stack((z, g2))
    if rule.name == "rda":
        if t < 1:
            raise ValueError("an RDA state needs t >= 1")
        gbar = -(w * params.gamma / np.sqrt(t) + np.sign(w) * params.l1)
        return np.column_stack((np.where(w == 0, 0.0, gbar * t),))
    if rule.fields == ("w", "n", "t_last"):
        return np.column_stack((w, g2, np.full(w.shape, float(t))))
    if rule.fields == ("w", "n"):
        return np.column_stack((w, g2))
    raise ValueError(f"no warm start for rule {rule.name!r}")


def squared_gradients(design: Design, w: Array) -> Array:
    """Per feature of ``design``, ``sum_e ((p_e - y_e) x_ei)^2`` at the weights ``w``."""
    s = design.dot(w)
    p = np.exp(-np.logaddexp(0.0, -s))  # sigmoid(s) without overflow on either side
    g = (p - design.labels)[design.rows] * design.values
    return np.bincount(design.columns, g * g, design.n_features).astype(np.float64)


def snapshot(
    rule: Rule,
    params: Any,
    design: Design,
    w: Array,
    hash_bits: int | None,
    loss: float,
    numeric: str = "raw",
    base_rate: BaseRate = MEAN,
) -> bytes:
    """The snapshot file of the warm start: every feature of ``design`` seeded from the batch
    weights ``w`` (fitted with summed log loss ``loss``), at :func:`seed_step`. At step 0 the
    log-loss sum is 0 (no example learned online yet); RDA starts at ``N`` and takes the
    batch's training loss, so that its mean stays a log loss of those ``N`` examples.
    ``numeric`` is how the batch's numbers were hashed, which the online model must share;
    ``base_rate`` its prior, which starts from the batch's counts (see the module doc)."""
    t = seed_step(rule, design.n_examples)
    counts = np.array([float(design.labels.sum()), float(design.n_examples)])
    bias = design.ids == np.uint64(bias_id(hash_bits))
    if not bias.any():  # no bias to give up the prior's share: the weights alone
        base_rate = BaseRate("off")
    seeded = np.array(w, dtype=np.float64)
    seeded[bias] -= base_rate.logit(counts)
    state = seed_state(rule, params, seeded, squared_gradients(design, w), t)
    header = Header(
        rule.name, dict(vars(params)), hash_bits, rule.fields, "train-batch",
        {"examples": design.n_examples}, numeric=numeric, base_rate=base_rate.text,
    )  # fmt: skip
    footer = Footer(
        t=t,
        logloss_sum=loss if t else 0.0,
        nonzero_weights=int(np.count_nonzero(rule.weights(state, t, params))),
        features_tracked=design.n_features,
        base_clicks=float(counts[0]),
        base_examples=float(counts[1]),
    )
    writer = Writer()
    return writer.start(header) + writer.rows(design.ids, state) + writer.finish(footer)
