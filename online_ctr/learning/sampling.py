"""Negative subsampling with importance weights (McMahan et al. 2013, section 4.4).

Clicks are rare, so most of a CTR stream is non-clicks, and most of the work of learning it
goes into them. At a negative rate ``r`` every click is kept and a fraction ``r`` of the
non-clicks, each kept one weighted ``1 / r``: the weighted loss, hence its gradient, is in
expectation the full stream's, and so are the weighted progressive log loss and calibration
(``sum w loss / sum w``, ``sum w p / sum w y``; see ``docs/concepts/lean-models.md``).

Which non-clicks are kept is a pure function of the example, a 64-bit hash of its features
(ids and values), never of a random draw: a retried request, a replay of the same file and the
service all keep the same ones, so the service still equals ``online-ctr replay`` bit for bit.
Two identical non-clicks share their fate (both kept or both dropped), which is still unbiased
over the hash but adds variance where one example repeats many times.

>>> from online_ctr.learning.features import FeatureHasher
>>> rows = [{"site": str(i)} for i in range(1000)]
>>> batch = FeatureHasher().batch(rows, labels=[1] * 100 + [0] * 900)
>>> sampled = keep_negatives(batch, 0.1)
>>> int(sampled.labels.sum()), len(sampled) - 100  # every click, about 90 non-clicks
(100, 77)
>>> sorted(set(sampled.weights.tolist()))
[1.0, 10.0]
>>> keep_negatives(batch, 1.0) is batch
True
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import Batch
from online_ctr.learning.splitmix import mix, uniform

#: Salts the example hash so that it is not the hash the compact encoding rounds with.
_SALT = np.uint64(0x6E65676174697665)  # "negative"


#: The lowest negative rate: a kept non-click weighs at most 10,000, so that one example's
#: gradient stays within what a model learns from safely.
MIN_RATE = 1e-4


def check_rate(rate: float) -> None:
    """A negative rate is a fraction in [MIN_RATE, 1]; 1 keeps everything."""
    if not MIN_RATE <= rate <= 1.0:
        raise ValueError(f"the negative rate must be from {MIN_RATE} to 1, got {rate!r}")


def example_hashes(batch: Batch) -> NDArray[np.uint64]:
    """A 64-bit hash per example of its features' ids and values, in any order: the XOR of
    one mixed hash per (id, value) pair, mixed again with the example's feature count."""
    pairs = mix(batch.ids ^ mix(batch.values.view(np.uint64) ^ _SALT))
    counts = np.diff(batch.indptr).astype(np.uint64)
    hashes = np.zeros(len(batch), np.uint64)
    nonempty = counts > 0
    starts = batch.indptr[:-1][nonempty]
    if len(starts):
        hashes[nonempty] = np.bitwise_xor.reduceat(pairs, starts)
    return mix(hashes ^ mix(counts))


def kept_negatives(batch: Batch, rate: float) -> NDArray[np.bool_]:
    """Per example, whether a non-click with its features is kept at ``rate``: its hash, as a
    uniform number in [0, 1), is below ``rate``."""
    kept: NDArray[np.bool_] = uniform(example_hashes(batch)) < rate
    return kept


def negative_weights(batch: Batch, rate: float) -> NDArray[np.float64]:
    """Per example, its weight should it be a non-click at ``rate``: ``1 / rate`` if kept,
    0 if sampled out. What a logged impression keeps until its label comes
    (:mod:`service.api.join_side`), and what :func:`keep_negatives` weighs non-clicks by."""
    return np.where(kept_negatives(batch, rate), 1.0 / rate, 0.0)


def keep_negatives(batch: Batch, rate: float) -> Batch:
    """``batch`` with every click and the non-clicks :func:`negative_weights` keeps, each of
    those weighted ``1 / rate`` times its own weight; ``batch`` itself at rate 1."""
    check_rate(rate)
    if rate == 1.0:
        return batch
    clicks = batch.labels == 1.0
    weights = np.where(clicks, 1.0, negative_weights(batch, rate)) * batch.example_weights()
    kept = weights > 0.0
    rows = np.flatnonzero(kept)
    lengths = np.diff(batch.indptr)[rows]
    pairs = np.repeat(kept, np.diff(batch.indptr))
    return Batch(
        np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        batch.ids[pairs],
        batch.values[pairs],
        batch.labels[rows],
        weights[rows],
    )
