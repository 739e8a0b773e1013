"""FTRL-Proximal with the base-rate prior, written out literally, with the changes to the
learner that :mod:`loadtests.costs.default_candidates` measures and the kernels do not have.

At :class:`Variant`'s defaults it is the default model, op for op: the same hashed features,
the same weight, ``sigma``, ``z`` and ``n`` updates (``rules/ftrl.py``), the prior's log-odds
added after the weights' sum and the logit clipped at 35, as the compiled learner does; the
script checks that its log loss equals ``online-ctr replay``'s on every log before it shows a
variant. The variants, each a function of the stream before the example, as the prior is:

- ``bias_l1``: the bias coordinate's own L1 (0: never truncated);
- ``no_bias``: no bias feature, the prior is the whole intercept;
- ``residual``: the residual-calibration offset ``log((Y + k) / (P + k))`` added to the logit,
  ``Y`` the clicks and ``P`` the model's own predictions so far, ``k`` this pseudo-count (0: off);
- ``l1_per_root_n``: the L1 threshold grows by this times ``sqrt(n)``, so a weight moves only
  once its summed gradient is that many root-sums-of-squares from 0.

:func:`one_feature` is the mechanism alone: one always-present feature over clicks of a fixed
rate, the prior fixed at that rate's log-odds (so its right weight is 0).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np

from online_ctr.learning.features import Batch
from online_ctr.learning.learner import LOGIT_CLIP
from online_ctr.learning.rules.ftrl import FTRLParams


@dataclass(frozen=True)
class Variant:
    """A change to the default learner (see the module doc); all off by default."""

    bias_l1: float | None = None
    no_bias: bool = False
    residual: float = 0.0
    l1_per_root_n: float = 0.0


def weight(z: float, n: float, l1: float, params: FTRLParams) -> float:
    """``rules.ftrl.weight_of`` with the threshold ``l1``."""
    if abs(z) <= l1:
        return 0.0
    return -(z - math.copysign(l1, z)) / ((params.beta + math.sqrt(n)) / params.alpha + params.l2)


def progressive(batch: Batch, bias: int, params: FTRLParams, variant: Variant) -> np.ndarray:
    """Each example's probability, predicted before it is learned."""
    z: dict[int, float] = {}
    n: dict[int, float] = {}
    clicks = examples = predicted = 0.0
    out = np.empty(len(batch))
    ids, values = batch.ids.tolist(), batch.values.tolist()
    for j in range(len(batch)):
        start, stop = int(batch.indptr[j]), int(batch.indptr[j + 1])
        touched = []
        s = 0.0
        for k in range(start, stop):
            feature, x = ids[k], values[k]
            if variant.no_bias and feature == bias:
                continue
            zi, ni = z.get(feature, 0.0), n.get(feature, 0.0)
            l1 = params.l1 if variant.bias_l1 is None or feature != bias else variant.bias_l1
            w = weight(zi, ni, l1 + variant.l1_per_root_n * math.sqrt(ni), params)
            touched.append((feature, x, w))
            s += w * x
        s += math.log((clicks + 0.5) / (examples - clicks + 0.5))
        if variant.residual:
            label_sum = clicks  # every weight is 1 here
            s += math.log((label_sum + variant.residual) / (predicted + variant.residual))
        p = 1.0 / (1.0 + math.exp(-min(max(s, -LOGIT_CLIP), LOGIT_CLIP)))
        out[j] = p
        y = float(batch.labels[j])
        clicks, examples, predicted = clicks + y, examples + 1.0, predicted + p
        for feature, x, w in touched:
            g = (p - y) * x
            ni = n.get(feature, 0.0)
            sigma = (math.sqrt(ni + g * g) - math.sqrt(ni)) / params.alpha
            z[feature] = z.get(feature, 0.0) + g - sigma * w
            n[feature] = ni + g * g
    return out


def one_feature(beta: float, rate: float = 0.005, steps: int = 10_000, runs: int = 100) -> float:
    """``sum(p) / sum(y)`` of one feature in every example, learned by FTRL (alpha 0.1, l1 0,
    l2 1, ``beta``) on top of a prior fixed at ``rate``'s log-odds, over ``runs`` seeded
    streams of ``steps`` examples clicked with probability ``rate``.

    >>> round(one_feature(0.1, runs=10), 2)  # 12% fewer clicks than there are
    0.88
    """
    params = FTRLParams(alpha=0.1, beta=beta, l1=0.0, l2=1.0)
    prior, stream = math.log(rate / (1.0 - rate)), random.Random(50)
    predicted = clicks = 0.0
    for _ in range(runs):
        z = n = 0.0
        for _ in range(steps):
            y = 1.0 if stream.random() < rate else 0.0
            w = weight(z, n, params.l1, params)
            p = 1.0 / (1.0 + math.exp(-(prior + w)))
            predicted, clicks = predicted + p, clicks + y
            g = p - y
            z += g - (math.sqrt(n + g * g) - math.sqrt(n)) / params.alpha * w
            n += g * g
    return predicted / clicks
