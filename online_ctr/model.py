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


class InMemoryModel:
    """State held in a growing numpy table indexed by a dict from feature id to row."""

    def __init__(self, rule: Rule, params: Any = None) -> None:
        self.rule = rule
        self.params = rule.params() if params is None else params
        self.t = 0
        self._rows: dict[int, int] = {}
        self._table = np.zeros((1024, len(rule.fields) + 1))

    def _row_indices(self, ids: NDArray[np.uint64], create: bool) -> NDArray[np.intp]:
        """Rows of ``ids``; unknown ids get new zero rows, or -1 when not ``create``."""
        rows = self._rows
        if create:
            for key in ids.tolist():
                if key not in rows:
                    rows[key] = len(rows)
            self._reserve(len(rows))
        return np.fromiter((rows.get(key, -1) for key in ids.tolist()), np.intp, len(ids))

    def _reserve(self, size: int) -> None:
        if size > len(self._table):
            grown = np.zeros((max(size, 2 * len(self._table)), self._table.shape[1]))
            grown[: len(self._table)] = self._table
            self._table = grown

    def state_of(self, ids: NDArray[np.uint64]) -> Array:
        """The rows (rule fields, then count) of ``ids``; zeros for unseen features."""
        rows = self._row_indices(ids, create=False)
        out = self._table[np.maximum(rows, 0)].copy()
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
        rows = self._row_indices(features.ids, create=True)
        step = learn(self.rule, self.params, self._table[rows, :-1], self.t, batch, features)
        self._table[rows, :-1] = step.state
        self._table[rows, -1] += step.counts
        self.t += len(batch)
        return step

    def snapshot(self) -> dict[int, Array]:
        """Every tracked feature's row, by id: for comparing with another store."""
        return {key: self._table[row].copy() for key, row in self._rows.items()}

    def features_tracked(self) -> int:
        """How many features have state."""
        return len(self._rows)

    def nonzero_weights(self) -> int:
        """An exact recount of the weights that are nonzero at the current step."""
        state = self._table[: len(self._rows), :-1]
        return int(np.count_nonzero(self.rule.weights(state, self.t, self.params)))
