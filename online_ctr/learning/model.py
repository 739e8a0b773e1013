"""An in-process model: a rule, its hyper-parameters, the global step and a table of state.

The table keeps one row per feature ever seen: the rule's state fields, then the feature's
occurrence count. The Redis store keeps exactly the same rows, so the two can be compared.
It learns example by example (:func:`~online_ctr.learning.sequential.learn_sequential`), whatever
the
size of the batches it is given; ``minibatch=True`` opts into the summed-gradient mini-batch
of :func:`~online_ctr.learning.learner.learn` instead, where a batch's size is part of the math.
``encoding="compact"`` rounds the state as the service's compact encoding stores it. With an
``admission`` rule (:mod:`online_ctr.learning.admission`) a feature gets a row only once
admitted, as the service stores it only then.

>>> from online_ctr.learning.features import FeatureHasher
>>> from online_ctr.learning.rules import get_rule
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

from online_ctr.learning.admission import (
    ADMIT_ALL,
    Admission,
    admitting,
    empty_counters,
)
from online_ctr.learning.calibration import Calibration, Calibrator
from online_ctr.learning.compact import check_encoding
from online_ctr.learning.features import BIAS_ID, Batch
from online_ctr.learning.learner import (
    Features,
    learn,
    logits,
    scoring_features,
    sigmoid,
    unique_features,
)
from online_ctr.learning.rules.base import Array, Rule
from online_ctr.learning.sequential import Learned, learn_sequential
from online_ctr.learning.table import StateTable


class InMemoryModel:
    """State held in a :class:`~online_ctr.learning.table.StateTable`: rule fields, then the
    count."""

    def __init__(
        self,
        rule: Rule,
        params: Any = None,
        minibatch: bool = False,
        encoding: str = "float64",
        calibration: Calibration = "off",
        admission: Admission = ADMIT_ALL,
        bias: int = BIAS_ID,
    ) -> None:
        check_encoding(encoding, rule.name)
        if minibatch and encoding != "float64":
            raise ValueError("the compact encoding rounds every update: use it without minibatch")
        if minibatch and admission.kind != "all":
            raise ValueError("admission drops gradients example by example: not with minibatch")
        #: The admission rule, the bias feature's id (always admitted), the counters of a
        #: counting Bloom filter, and the gradients dropped so far.
        self.admission = admission
        self.bias = np.uint64(bias)
        self.counters = empty_counters() if admission.counted else None
        self.dropped = 0
        self.rule = rule
        self.params = rule.params() if params is None else params
        self.minibatch = minibatch
        self.encoding = encoding
        self.t = 0
        self.table = StateTable(width=len(rule.fields) + 1)
        #: With ``calibration="power"``: the calibration as the service's learner keeps it
        #: (refitted after each batch), and the progressive metrics of the calibrated
        #: predictions (each example's served with the fit from before its batch).
        self.calibration = Calibrator() if calibration == "power" else None

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

    def learn(self, batch: Batch) -> Learned:
        """Predict each example before learning from it (progressive validation)."""
        # The distinct ids in no particular order: rows are found by id, and the learner
        # takes the examples in order whatever order they are in (a sort of them was 6%).
        features = scoring_features(batch)
        if self.admission.kind != "all":
            learned = self._learn_admitting(batch, features)
        else:
            rows = self.table.rows(features.ids, create=True)
            data = self.table.data
            learned = self._learn(data[rows, :-1], batch, features)
            data[rows, :-1] = learned.state
            data[rows, -1] += learned.counts
        self.t += len(batch)
        if self.calibration is not None:
            self.calibration.learn(learned.probabilities, batch.labels, batch.weights)
        return learned

    def _learn_admitting(self, batch: Batch, features: Features) -> Learned:
        """:meth:`learn` where only admitted features have (and get) a row."""
        rows = self.table.rows(features.ids, create=False)
        known = rows >= 0
        state = np.zeros((len(features.ids), len(self.rule.fields)))
        state[known] = self.table.data[rows[known], :-1]
        before = known | (features.ids == self.bias)
        argument = admitting(self.admission, features.ids, before, self.counters)
        learned = learn_sequential(
            self.rule, self.params, state, self.t, batch, features, self.encoding, argument
        )
        admitted = argument.admitted_rows()
        self.dropped += argument.dropped_count()
        kept = self.table.rows(features.ids[admitted], create=True)
        self.table.data[kept, :-1] = learned.state[admitted]
        self.table.data[kept, -1] += learned.counts[admitted]
        return learned

    def _learn(self, state: Array, batch: Batch, features: Features) -> Learned:
        """One example at a time, or the whole batch from its start with ``minibatch``."""
        if not self.minibatch:
            return learn_sequential(
                self.rule, self.params, state, self.t, batch, features, self.encoding
            )
        step = learn(self.rule, self.params, state, self.t, batch, features)
        return Learned(step.logits, step.probabilities, step.losses, step.state, step.counts)

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
