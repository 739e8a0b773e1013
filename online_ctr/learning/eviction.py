"""A feature budget: a model holds at most ``max_features`` features, evicting the least
recently touched first, and those whose weight is zero before any that carries weight.

Expiry (:mod:`online_ctr.learning.retention`) bounds what a model holds by age; a budget bounds
it by count, the ceiling an operator sets from Redis memory. McMahan et al. (2013, section 4)
keep state for the features that matter; of those a model holds, most weigh exactly zero at
FTRL's ``l1`` (92% of the Criteo head's, 93% of the Avazu head's), so they go first. Like
expiry it is a pure function of the stream, so the service equals ``online-ctr replay`` at any
batch size:

* Each stored feature carries its last step ``tau`` (the state's step column, as with expiry)
  and a class: whether its weight at ``tau``, as its last update left it, is zero. Only a touch
  changes either: a zero weight stays zero untouched under every rule. A weight can reach zero
  untouched (FOBOS and the truncations shrink it at its next read, RDA's average shrinks), and
  then counts among the weights until it is touched or evicted by age.
* Steps fall in bins of ``bin_examples`` examples: bin ``b`` holds the steps
  ``b * bin_examples + 1`` to ``(b + 1) * bin_examples``. The model counts its features per
  class and bin, over the last ``window`` bins; older bins are merged into the oldest one kept.
* After each example, while the model holds more than ``max_features``, it evicts the oldest
  bin of zero weights, then, once none is left, the oldest bin of weights, never the bin of the
  current example. So the model holds at most ``max_features`` plus the features touched in
  the current bin, and an eviction takes a whole bin at once: least recently touched first, to
  within ``bin_examples`` examples (and within the merged bin's span, for one older than the
  window).
* An eviction moves a cutoff: a stored feature is gone once its ``tau`` is at most the
  cutoff of all features, or at most the cutoff of zero weights and its weight is zero. A
  feature gone contributes 0 (a zero weight did already), and met again it is learned as a new
  one (with an admission rule, it waits to be admitted again). As with expiry, a row still
  stored past its cutoff is read as gone, so the stores delete evicted rows when it suits them.

>>> budget = feature_budget(3, bin_examples=2, window=4)
>>> budget.max_features, budget.counts.shape, budget.tracked(), budget.evicted()
(3, (3, 4), 0, 0)
>>> tau, zero = np.array([1.0, 2.0, 3.0, 0.0]), np.array([True, False, True, False])
>>> budget.marks[CUT_ZERO] = 2  # bin 0 of zero weights evicted
>>> held(tau, zero, budget.marks).tolist()
[False, True, True, False]
>>> check_max_features(-1)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: max_features must be a whole number of features from 1 to 2^52, or 0 ...; got -1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from online_ctr.learning.rules.base import Rule

#: ``max_features`` of a model without a budget.
UNBOUNDED = 0
#: The most: counts are exact in the int64 marks, and steps in float64 below 2^53.
MOST = 1 << 52
#: Examples per bin: the granularity of "least recently touched", and the most a model can
#: hold past its budget is the features of this many examples (64 Criteo rows touch at most
#: 2,560: 39 fields and the bias each).
BIN_EXAMPLES = 64
#: Bins counted apart (the last 1,048,576 examples at 64 a bin); older ones are merged.
WINDOW_BINS = 16_384
#: Rows of :attr:`Evicting.counts`: zero weights, weights, and of those the weights that never
#: reach zero untouched (``rule.expiry`` infinite). The learner keeps the first two; the third
#: is the service's exact nonzero count (:func:`recount_stable`), and goes with its bins.
ZERO, WEIGHTED, STABLE = range(3)
#: Indices into :attr:`Evicting.marks`: the oldest bin kept (older ones are merged into it),
#: the features held, the features evicted so far, the cutoff of zero weights and the cutoff
#: of all features (steps: a feature whose ``tau`` is at most a cutoff is gone).
LOWEST, TRACKED, EVICTED, CUT_ZERO, CUT_ALL = range(5)
#: What the setting does, as its settings and the API describe it.
SETTING = (
    "Hold at most this many features (plus those touched in the last 64 examples): past it, "
    "evict the least recently touched, zero weights first; met again, an evicted feature is "
    "learned as a new one. 0: no budget. Needs the float64 state encoding."
)


class Evicting(NamedTuple):
    """A model's budget as the compiled learner (:func:`online_ctr.learning.kernels.learner`)
    reads and updates it: ``max_features`` (0: no budget, and nothing else is read), the bin
    width, the counts per class (rows :data:`ZERO`, :data:`WEIGHTED`, :data:`STABLE`) and bin
    (bin ``b`` in slot ``b % window``), and the :data:`LOWEST` ... :data:`CUT_ALL` marks.
    The arrays are the model's, carried from batch to batch and updated in place."""

    max_features: int
    bin_examples: int
    counts: NDArray[np.int64]
    marks: NDArray[np.int64]

    def tracked(self) -> int:
        """How many features the model holds."""
        return int(self.marks[TRACKED])

    def evicted(self) -> int:
        """How many features the budget has evicted so far."""
        return int(self.marks[EVICTED])

    def copy(self) -> Evicting:
        """The same budget, with arrays of its own (a group learns on a copy, which becomes
        the model's once committed)."""
        return self._replace(counts=self.counts.copy(), marks=self.marks.copy())

    def slots(self, tau: NDArray[np.float64]) -> NDArray[np.int64]:
        """The slots of the bins of last steps ``tau`` (at least 1): a bin older than the
        window is counted in the oldest kept."""
        bins = np.maximum((tau.astype(np.int64) - 1) // self.bin_examples, self.marks[LOWEST])
        slots: NDArray[np.int64] = bins % self.counts.shape[1]
        return slots


def check_max_features(value: int) -> int:
    """``value`` if it is a valid budget (0 for none), else a ValueError saying what is."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value <= MOST:
        raise ValueError(
            "max_features must be a whole number of features from 1 to 2^52, or 0 for no "
            f"budget; got {value!r}"
        )
    return int(value)


def feature_budget(
    max_features: int, bin_examples: int = BIN_EXAMPLES, window: int = WINDOW_BINS
) -> Evicting:
    """An empty model's budget of ``max_features`` (0: none, with no counts kept)."""
    check_max_features(max_features)
    if bin_examples < 1 or window < 2:
        raise ValueError(f"bins of at least 1 example and 2 bins, got {bin_examples}, {window}")
    slots = window if max_features else 2
    return Evicting(
        max_features, bin_examples, np.zeros((3, slots), np.int64), np.zeros(5, np.int64)
    )


def no_budget() -> Evicting:
    """The learner's argument for a model without a budget."""
    return feature_budget(UNBOUNDED)


def weightless(
    rule: Rule, params: Any, fields: NDArray[np.float64], tau: NDArray[np.float64]
) -> NDArray[np.bool_]:
    """Which rows (the rule's ``fields``) had a zero weight at their last step ``tau``: the
    budget's class of zero weights."""
    zero: NDArray[np.bool_] = rule.weights(fields, tau, params) == 0.0
    return zero


def held(
    tau: NDArray[np.float64], zero: NDArray[np.bool_], marks: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Which features, last touched at steps ``tau`` (0: not stored) with a zero weight there
    or not (``zero``), a budget of ``marks`` still holds."""
    stored: NDArray[np.bool_] = tau > 0
    past_all: NDArray[np.bool_] = tau <= marks[CUT_ALL]
    past_zero: NDArray[np.bool_] = zero & (tau <= marks[CUT_ZERO])
    kept: NDArray[np.bool_] = stored & ~past_all & ~past_zero
    return kept


def recount_stable(
    after: Evicting,
    before: Evicting,
    old: tuple[NDArray[np.float64], NDArray[np.bool_]],
    new: tuple[NDArray[np.float64], NDArray[np.bool_]],
) -> None:
    """Move the :data:`STABLE` counts of ``after`` (a budget once a group is learned, from
    ``before``) for the features the group touched: ``old`` and ``new`` are their last steps
    and whether they carried a weight that never reaches zero untouched, before and after the
    group. A feature stops counting where it did unless it was gone already, or its bin was
    evicted during the group (the learner emptied the bin's count then); it counts where it
    is now if it is held.

    >>> before = feature_budget(10, bin_examples=2, window=4)
    >>> before.counts[STABLE, 0] = 1  # one stable weight, last touched at step 1
    >>> after = before.copy()
    >>> tau = np.array([1.0]), np.array([5.0])
    >>> recount_stable(after, before, (tau[0], np.array([True])), (tau[1], np.array([True])))
    >>> after.counts[STABLE].tolist()  # it moved to the bin of step 5
    [0, 0, 1, 0]
    """
    old_tau, old_stable = old
    new_tau, new_stable = new
    cut = after.marks[CUT_ALL]
    leaving = old_stable & (old_tau > before.marks[CUT_ALL]) & (old_tau > cut)
    np.subtract.at(after.counts[STABLE], after.slots(old_tau[leaving]), 1)
    np.add.at(after.counts[STABLE], after.slots(new_tau[new_stable & (new_tau > cut)]), 1)
