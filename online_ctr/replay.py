"""Replay a stream of labelled examples through a model, scoring each before learning from it.

This is progressive validation (McMahan et al. 2013, section 5.1) in mini-batches: every
example of a batch is predicted with the weights as they were at the batch's start, then the
batch is learned. The same loop serves the ``replay`` command, the benchmarks and the tests.

>>> from online_ctr.features import FeatureHasher
>>> from online_ctr.model import InMemoryModel
>>> from online_ctr.rules import get_rule
>>> stream = [({"site": "news"}, 1), ({"site": "blog"}, 0)] * 50
>>> seen = []
>>> result = replay(
...     stream, InMemoryModel(get_rule("ftrl")), FeatureHasher(), batch_size=10,
...     on_batch=lambda progress: seen.append(progress.examples),
... )
>>> result.examples, seen[:3], result.auc
(100, [10, 20, 30], 1.0)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any, Protocol

from online_ctr.features import Batch, Example, FeatureHasher
from online_ctr.learner import Step
from online_ctr.rules.base import Rule
from online_ctr.stream_metrics import StreamMetrics


class Model(Protocol):
    """What the replay needs of a model: :class:`online_ctr.model.InMemoryModel` has it."""

    rule: Rule
    params: Any

    def learn(self, batch: Batch) -> Step:
        """Predict the batch with the current weights, then learn from it."""

    def nonzero_weights(self) -> int:
        """An exact count of the nonzero weights now."""

    def features_tracked(self) -> int:
        """How many features have state."""


@dataclass_frozen := dataclasses.dataclass(frozen=True)  # noqa: B008
class BatchProgress:
    """Where the replay stands after a batch, handed to the ``on_batch`` callback.

    ``model`` is live: a callback may read it (``model.nonzero_weights()`` for a sparsity
    curve, say) but not change it. Time spent in the callback is not counted in ``seconds``.
    """

    examples: int
    batch_logloss: float
    logloss: float
    seconds: float
    model: Model
