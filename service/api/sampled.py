"""Feedback as the API puts it on the stream: each example's importance weight, and the
non-clicks a model's negative rate keeps (:mod:`online_ctr.learning.sampling`), chosen here,
before the stream, so that the stream, the workers and Redis hold only what is learned.

>>> from online_ctr.learning.features import FeatureHasher
>>> batch = weighted(FeatureHasher().batch([{"a": "b"}], [1]), [2.5])
>>> batch.weights.tolist()
[2.5]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from prometheus_client import Counter

from online_ctr.learning.features import Batch
from online_ctr.learning.sampling import check_rate, keep_negatives
from online_ctr.store.ingest import Appended


def weighted(batch: Batch, weights: Sequence[float] | None) -> Batch:
    """``batch`` with the examples' importance ``weights`` (None: every weight is 1)."""
    if weights is None:
        return batch
    return replace(batch, weights=np.asarray(weights, np.float64))


class Sampling:
    """A model's negative rate, and the count of the non-clicks it dropped."""

    def __init__(self, rate: float, dropped: Counter) -> None:
        check_rate(rate)
        self.rate = rate
        self._dropped = dropped

    def kept(self, batch: Batch) -> Batch | None:
        """What of ``batch`` goes on the stream; None: all of it, as it is (rate 1)."""
        return None if self.rate == 1.0 else keep_negatives(batch, self.rate)

    def count(self, batch: Batch, kept: Batch | None, appended: Appended) -> None:
        """Count the non-clicks dropped from an accepted ``batch`` (a replay's were counted
        when it was first accepted)."""
        if kept is not None and not appended.replayed:
            self._dropped.inc(len(batch) - len(kept))
