"""An in-process model: a rule, its hyper-parameters, the global step and a table of state.

The table keeps one row per feature ever seen: the rule's state fields, then the feature's
occurrence count. The Redis store keeps exactly the same rows, so the two can be compared.

>>> from online_ctr.features import FeatureHasher
>>> from online_ctr.rules import get_rule
>>> model = InMemoryModel(get_rule("ftrl"))
>>> batch = FeatureHasher().batch([{"site": "news"}], labels=[1])
>>> model.learn(batch).probabilities
array([0.5])
>>> model.t, model.features_tracked(), model.nonzero_weights()
(1, 2, 0)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.features import Batch
from online_ctr.learner import Step, learn, logits, sigmoid, unique_features
from online_ctr.rules.base import Array, Rule
from online_ctr.table import StateTable


class InMemoryModel:
    """State held in a :class:`~online_ctr.table.StateTable`: rule fields, then the count."""

    def __init__(self, rule: Rule, params: Any = None) -> None:
        self.rule = rule
        self.params = rule.params() if params is None else params
        self.t = 0
        self.table = StateTable(width=len(rule.fields) + 1)

    def state_of(self, ids: NDArray[np.uint64]) -> Array:
        """The rows (rule fields, then count) of ``ids``; zeros for unseen features."""
        rows = self.table.rows(ids, create=False)
        out = self.table.data[np.maximum(rows, 0)]
        out[rows < 0] = 0.0
        return out

    def predict(self, batch: Batch) -> Array:
        """Probabilities for a batch, without learning."""
        features = unique_features(batch)
        state = self.state_of(features.ids)[:, :-1]
        return sigmoid(logits(batch, features, self.rule.weights(state, self.t, self.params)))

    def learn(self, batch: Batch) -> Step:
        """Predict the batch, then learn from it (progressive validation)."""
        features = unique_features(batch)
        rows = self.table.rows(features.ids, create=True)
        data = self.table.data
        step = learn(self.rule, self.params, data[rows, :-1], self.t, batch, features)
        data[rows, :-1] = step.state
        data[rows, -1] += step.counts
        self.t += len(batch)
        return step

    def snapshot(self) -> dict[int, Array]:
        """Every tracked feature's row, by id: for comparing with another store."""
        n = len(self.table)
        return dict(zip(self.table.ids[:n].tolist(), self.table.data[:n].copy(), strict=True))

    def features_tracked(self) -> int:
        """How many features have state."""
        return len(self.table)

    def nonzero_weights(self) -> int:
        """An exact recount of the weights that are nonzero at the current step."""
        state = self.table.data[: len(self.table), :-1]
        return int(np.count_nonzero(self.rule.weights(state, self.t, self.params)))
