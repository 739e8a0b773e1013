"""An in-process model: a rule, its hyper-parameters, the global step and a table of state.

The table keeps one row per feature ever seen: the rule's state fields, then the feature's
occurrence count. The Redis store keeps exactly the same rows, so the two can be compared.
It learns example by example (:func:`~online_ctr.learning.sequential.learn_sequential`), whatever
the
size of the batches it is given; ``minibatch=True`` opts into the summed-gradient mini-batch
of :func:`~online_ctr.learning.learner.learn` instead, where a batch's size is part of the math.
``encoding="compact"`` rounds the state as the service's compact encoding stores it. With an
``admission`` rule (:mod:`online_ctr.learning.admission`) a feature gets a row only once
admitted, as the service stores it only then. With ``expire_after`` (:mod:`~online_ctr.learning.
retention`) each row also keeps its feature's last step, and a feature untouched for that many
examples is gone: its row is deleted, now or later (a row past its end is read as gone). With
``max_features`` (:mod:`~online_ctr.learning.eviction`) the rows keep the last step too, and the
model holds at most that many features, evicting the least recently touched, zero weights first.
Every prediction's logit starts from the ``base_rate`` prior (:mod:`~online_ctr.learning.
base_rate`; ``BaseRate("off")`` for the weights alone), whose counts the model keeps in
``base``.

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

from online_ctr.learning import retention
from online_ctr.learning.admission import (
    ADMIT_ALL,
    PERIODS,
    Admission,
    Tally,
    admitting,
    empty_counters,
    features_pending,
)
from online_ctr.learning.base_rate import MEAN, BaseRate
from online_ctr.learning.calibration import Calibration, Calibrator
from online_ctr.learning.compact import check_encoding
from online_ctr.learning.eviction import (
    BIN_EXAMPLES,
    UNBOUNDED,
    WINDOW_BINS,
    check_max_features,
    feature_budget,
    held,
    weightless,
)
from online_ctr.learning.features import BIAS_ID, Batch
from online_ctr.learning.learner import (
    Features,
    learn,
    logits,
    scoring_features,
    sigmoid,
    unique_features,
)
from online_ctr.learning.retention import (
    NEVER,
    Retaining,
    check_expire_after,
    live,
    retaining,
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
        expire_after: int = NEVER,
        max_features: int = UNBOUNDED,
        budget_bins: tuple[int, int] = (BIN_EXAMPLES, WINDOW_BINS),
        base_rate: BaseRate = MEAN,
    ) -> None:
        check_encoding(encoding, rule.name)
        #: Features untouched for this many examples are gone (0: never); ``expired`` counts
        #: the rows deleted so (the kernel's restarts, then :meth:`_purge`'s), and the rows
        #: are purged again when the step reaches ``_next_purge``.
        self.expire_after = check_expire_after(expire_after)
        self.expired = 0
        self._next_purge = 0
        retention.check_encoding(self.expire_after, encoding)
        if self.expire_after and minibatch:
            raise ValueError("features expire example by example: not with minibatch")
        #: The feature budget (``budget_bins``: its bin width and window, for tests).
        self.budget = feature_budget(check_max_features(max_features), *budget_bins)
        retention.check_encoding(max_features, encoding, ("max_features", "the encoding"))
        if max_features and minibatch:
            raise ValueError("a budget evicts example by example: not with minibatch")
        self._retaining()  # refuses expire_after with max_features
        if minibatch and encoding != "float64":
            raise ValueError("the compact encoding rounds every update: use it without minibatch")
        if minibatch and admission.kind != "all":
            raise ValueError("admission drops gradients example by example: not with minibatch")
        #: The admission rule, the bias feature's id (always admitted), the counters of a
        #: counting Bloom filter and its admissions per halving period, and the gradients
        #: dropped so far.
        self.admission = admission
        self.bias = np.uint64(bias)
        self.counters = empty_counters() if admission.counted else None
        self.recent = np.zeros(PERIODS, np.int64)
        self.dropped = 0
        #: The base-rate prior and its counts ``(c, m)`` so far.
        self.base_rate = base_rate
        self.base = base_rate.start()
        self.rule = rule
        self.params = rule.params() if params is None else params
        self.minibatch = minibatch
        self.encoding = encoding
        self.t = 0
        #: The rule's fields, the last step with ``expire_after`` or ``max_features``, then the
        #: count.
        self.stepped = self.expire_after != NEVER or max_features != UNBOUNDED
        self.width = len(rule.fields) + self.stepped
        self.table = StateTable(width=self.width + 1)
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
        state = self.state_of(features.ids)
        gone = ~self._live(state)
        weights = self.rule.weights(state[:, : len(self.rule.fields)], self.t, self.params)
        weights[gone] = 0.0
        return sigmoid(logits(batch, features, weights) + self.base_rate.logit(self.base))

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
        if self.expire_after and self.t >= self._next_purge:
            self._purge()
        if self.budget.max_features and len(self.table) > 2 * self.budget.max_features + 4096:
            self._purge()  # past twice the budget, in proportion to it
        if self.calibration is not None:
            self.calibration.learn(learned.probabilities, batch.labels, batch.weights)
        return learned

    def _learn_admitting(self, batch: Batch, features: Features) -> Learned:
        """:meth:`learn` where only admitted features have (and get) a row."""
        rows = self.table.rows(features.ids, create=False)
        known = rows >= 0
        state = np.zeros((len(features.ids), self.width))
        state[known] = self.table.data[rows[known], :-1]
        if self.stepped:  # a row zeroed when its feature expired is not admitted
            known &= state[:, -1] > 0
        before = known | (features.ids == self.bias)
        argument = admitting(self.admission, features.ids, before, self.counters, self.recent)
        retaining = self._retaining()
        base = self.base_rate.kernel(self.base)
        learned = learn_sequential(
            self.rule, self.params, state, self.t, batch, features, self.encoding, argument,
            retaining, base,
        )  # fmt: skip
        self.base = base[2:].copy()
        admitted = argument.admitted_rows()
        self.dropped += argument.dropped_count()
        self.expired += retaining.expired_count()
        kept = self.table.rows(features.ids[admitted], create=True)
        self.table.data[kept, :-1] = learned.state[admitted]
        self.table.data[kept, -1] += learned.counts[admitted]
        # A stored feature that expired and was not admitted again is gone (counted already):
        # its row is as a new one's, all zero, until the next purge deletes it.
        self.table.data[rows[known & ~admitted]] = 0.0
        return learned

    def _learn(self, state: Array, batch: Batch, features: Features) -> Learned:
        """One example at a time, or the whole batch from its start with ``minibatch``."""
        if not self.minibatch:
            retaining = self._retaining()
            base = self.base_rate.kernel(self.base)
            learned = learn_sequential(
                self.rule, self.params, state, self.t, batch, features, self.encoding,
                retaining=retaining, base=base,
            )  # fmt: skip
            self.expired += retaining.expired_count()
            self.base = base[2:].copy()
            return learned
        # The whole batch is predicted with the prior at its start, as with the weights.
        offset = self.base_rate.logit(self.base)
        step = learn(self.rule, self.params, state, self.t, batch, features, offset)
        self.base = self.base_rate.after(
            self.base, batch.labels.tolist(), batch.example_weights().tolist()
        )
        return Learned(step.logits, step.probabilities, step.losses, step.state, step.counts)

    def _retaining(self) -> Retaining:
        return retaining(self.expire_after, self.budget)

    def _live(self, rows: Array) -> NDArray[np.bool_]:
        """Which of table ``rows`` (or rows as :meth:`state_of` gives them) the model holds now:
        every one, unless features expire or are evicted."""
        tau = rows[:, self.width - 1]
        if self.expire_after:
            return live(tau, self.t, self.expire_after)
        if self.budget.max_features:
            fields = rows[:, : len(self.rule.fields)]
            return held(tau, weightless(self.rule, self.params, fields, tau), self.budget.marks)
        return np.ones(len(rows), np.bool_)

    def _purge(self) -> None:
        """Delete the rows of features gone, counting them expired (the budget counted its
        evictions already): only memory, since a row past its end or cutoff is read as gone (so
        how often this runs changes no result)."""
        data = self.table.data[: len(self.table)]
        kept = self._live(data)
        if self.expire_after:
            self.expired += int((~kept & (data[:, self.width - 1] > 0)).sum())
        self.table.keep(np.flatnonzero(kept))
        self._next_purge = self.t + max(1, self.expire_after // 2)

    def _held(self) -> tuple[NDArray[np.uint64], Array]:
        """The ids and table rows of the features the model holds now: views of the table's,
        but with expiry or a budget (then only the live ones, copied)."""
        n = len(self.table)
        ids, data = self.table.ids[:n], self.table.data[:n]
        if not self.stepped:
            return ids, data
        held = self._live(data)
        return ids[held], data[held]

    def snapshot(self) -> dict[int, Array]:
        """Every tracked feature's row, by id: for comparing with another store."""
        ids, rows = self._held()
        return dict(zip(ids.tolist(), rows.copy(), strict=True))

    def features_tracked(self) -> int:
        """How many features have state."""
        return len(self._held()[0])

    def features_expired(self) -> int:
        """How many times a feature has expired so far (each deleted, or past its end)."""
        if not self.expire_after:
            return 0
        data = self.table.data[: len(self.table)]
        return self.expired + int((~self._live(data) & (data[:, self.width - 1] > 0)).sum())

    def features_pending(self) -> int | None:
        """An estimate of the features waiting for admission (``bloom`` only, else None):
        :func:`~online_ctr.learning.admission.features_pending`."""
        if self.counters is None:
            return None
        return features_pending(Tally.of(self.counters, self.recent), self.admission, self.t)

    def features_evicted(self) -> int:
        """How many features the budget has evicted so far."""
        return self.budget.evicted()

    def nonzero_weights(self) -> int:
        """An exact recount of the weights that are nonzero at the current step."""
        state = self._held()[1][:, : len(self.rule.fields)]
        return int(np.count_nonzero(self.rule.weights(state, self.t, self.params)))
