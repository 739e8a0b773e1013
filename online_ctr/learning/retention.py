"""Feature expiry: a feature untouched for ``expire_after`` examples is deleted with its state.

A CTR stream keeps meeting ids it will never see again (a creative retired, a user gone), and a
model that keeps their state forever grows without end. With ``expire_after = N``, each stored
feature carries the step of the example that last touched it, ``tau`` (1-based: the stream's
``tau``-th example), as one more state column after the rule's fields. The model after ``t``
examples holds the feature while ``t < tau + N``: example ``tau + N + 1``, the first after
``N`` that did not touch it, finds it gone. A feature gone contributes 0 to every prediction,
and when it occurs again it is learned as a new one: its state starts from zero and, with an
admission rule (:mod:`online_ctr.learning.admission`), it waits to be admitted again (its
Bloom counts, kept apart, are not reset). Monolith's expirable embeddings, DeepRec's
GlobalStepEvict and TorchRec's TTL eviction do the same with time; a step count makes it a pure
function of the stream, so the service equals ``online-ctr replay`` at any batch size.

The compiled loop (:mod:`online_ctr.learning.kernels`) applies the rule as it meets each
feature, before the example is scored; deleting a feature whose step has passed is then only
a matter of memory, never of the math: a row still stored after its end is read as gone. So
the stores delete expired rows whenever it suits them (:func:`live`), and their counts of
features expired are exact once they have.

>>> tau = np.array([1.0, 5.0, 0.0])  # 0: a feature not stored
>>> live(tau, t=10, expire_after=6).tolist(), ends(tau[:2], 6).tolist()
([False, True, False], [7.0, 11.0])
>>> check_expire_after(-1)
Traceback (most recent call last):
...
ValueError: expire_after must be a whole number of examples from 1 to 2^52, or 0 for never; got -1
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.eviction import Evicting, no_budget

#: ``expire_after`` of a model that keeps every feature.
NEVER = 0
#: The most: steps are float64 in the state, exact below 2^53.
MOST = 1 << 52
#: What the setting does, as its settings and the API describe it.
SETTING = (
    "Delete a feature's state once this many examples have passed without touching it (met "
    "again, it is learned as a new feature); 0: never. Needs the float64 state encoding."
)


class Retaining(NamedTuple):
    """What the compiled learner (:func:`online_ctr.learning.kernels.learner`) lets a model
    keep: the span in examples (0: never), a one-item count of the features found expired,
    which the learner adds to, and the model's feature budget
    (:mod:`online_ctr.learning.eviction`). With neither a span nor a budget the state has no
    step column."""

    expire_after: int
    expired: NDArray[np.int64]
    budget: Evicting

    def stepped(self) -> bool:
        """Whether the state carries each feature's last step."""
        return self.expire_after != NEVER or self.budget.max_features != 0

    def expired_count(self) -> int:
        """How many times the learner found a feature expired (and started it again)."""
        return int(self.expired[0])


def check_expire_after(value: int) -> int:
    """``value`` if it is a valid span (0 for never), else a ValueError saying what is."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value <= MOST:
        raise ValueError(
            "expire_after must be a whole number of examples from 1 to 2^52, or 0 for never; "
            f"got {value!r}"
        )
    return int(value)


def check_encoding(
    expire_after: int, encoding: str, names: tuple[str, str] = ("expire_after", "the encoding")
) -> None:
    """Refuse an ``expire_after`` with an encoding other than float64, naming the two
    settings as ``names`` (the compact encoding's value has no room for the last step)."""
    if expire_after and encoding != "float64":
        raise ValueError(
            f"{names[0]} needs {names[1]} float64 (a compact value has no room for a "
            "feature's last step)"
        )


def check_one_bound(expire_after: int, max_features: int) -> None:
    """Refuse a model with both a span and a feature budget: a budget counts the features it
    holds, which a span would take away unseen."""
    if expire_after and max_features:
        raise ValueError("a model has expire_after or max_features, not both")


def retaining(expire_after: int = NEVER, budget: Evicting | None = None) -> Retaining:
    """The learner's argument for a model of span ``expire_after`` and ``budget`` (its own,
    carried from batch to batch; None: no budget), at most one of them
    (:func:`check_one_bound`)."""
    budget = no_budget() if budget is None else budget
    check_one_bound(expire_after, budget.max_features)
    return Retaining(check_expire_after(expire_after), np.zeros(1, np.int64), budget)


def retain_all() -> Retaining:
    """The learner's argument for a model whose features never expire."""
    return retaining(NEVER)


def live(tau: NDArray[np.float64], t: int, expire_after: int) -> NDArray[np.bool_]:
    """Which features, last touched at steps ``tau``, the model holds after ``t`` examples
    (with ``expire_after`` of 0 every stored one, ``tau > 0``)."""
    stored: NDArray[np.bool_] = tau > 0
    if expire_after == NEVER:
        return stored
    return stored & (tau + expire_after > t)


def ends(tau: NDArray[np.float64], expire_after: int) -> NDArray[np.float64]:
    """The step from which each feature is gone unless touched again: ``tau + N``."""
    return tau + float(expire_after)
