"""Keeping an exact nonzero-weight count without scanning the model.

Untouched weights only ever move towards zero, and each rule knows when an untouched nonzero
weight reaches zero (``rule.expiry``). So the nonzero weights split into *stable* ones (never
reach zero untouched: counted by a number) and *expiring* ones (kept in a set ordered by the
step at which they reach zero, purged as the step passes it). A batch changes the count only
through the features it touches; :func:`nonzero_change` says how.

>>> from online_ctr.learning.rules import get_rule
>>> rule = get_rule("rda")
>>> params = rule.params(l1=0.1)
>>> old = rule.zeros(2)
>>> new = rule.update(old, np.array([-3.0, 0.01]), np.zeros(2), 4, params)
>>> change = nonzero_change(rule, params, np.array([7, 9], np.uint64), old, 3, new, 4)
>>> change.entering.tolist(), change.entering_steps.tolist(), change.stable_delta
([7], [30.0], 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.eviction import CUT_ALL
from online_ctr.learning.retention import NEVER, ends, live
from online_ctr.learning.rules.base import Array, Rule


@dataclass(frozen=True)
class NonzeroChange:
    """Touched features leaving the expiring set, entering it (with their steps), and the
    change in the number of stable nonzero weights."""

    leaving: NDArray[np.uint64]
    entering: NDArray[np.uint64]
    entering_steps: Array
    stable_delta: int
    #: Which touched features carried a stable nonzero weight (one that never reaches zero
    #: untouched) before the batch, and after it.
    stable_before: NDArray[np.bool_] | None = None
    stable_after: NDArray[np.bool_] | None = None
    #: Which touched features enter the expiring set (``entering`` is their ids).
    entering_rows: NDArray[np.bool_] | None = None


def classify(
    rule: Rule,
    params: Any,
    state: Array,
    t: int,
    expire_after: int = NEVER,
    marks: NDArray[np.int64] | None = None,
) -> tuple[NDArray[np.bool_], Array]:
    """Which weights are nonzero at step ``t``, and for those, the step they expire at. With
    ``expire_after`` (:mod:`online_ctr.learning.retention`) the rows end with each feature's
    last step: a feature gone has no weight, and every weight expires at the latest when its
    feature does. With a budget's ``marks`` (:mod:`online_ctr.learning.eviction`) they end
    with it too, and a feature evicted has no weight (one evicted as a zero weight had none)."""
    stepped = expire_after != NEVER or marks is not None
    fields = state[:, : len(rule.fields)] if stepped else state
    nonzero = rule.weights(fields, t, params) != 0
    if expire_after:
        nonzero &= live(state[:, -1], t, expire_after)
    if marks is not None:
        nonzero &= state[:, -1] > marks[CUT_ALL]
    steps = np.full(state.shape[0], np.inf)
    if nonzero.any():
        steps[nonzero] = rule.expiry(fields[nonzero], t, params)
        if expire_after:
            steps[nonzero] = np.minimum(steps[nonzero], ends(state[nonzero, -1], expire_after))
    return nonzero, steps


def nonzero_change(
    rule: Rule,
    params: Any,
    ids: NDArray[np.uint64],
    old_state: Array,
    old_t: int,
    new_state: Array,
    new_t: int,
    expire_after: int = NEVER,
    marks: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None,
) -> NonzeroChange:
    """How a batch that took ``old_state`` at ``old_t`` to ``new_state`` at ``new_t`` changes
    the stable count and the expiring set, for the features it touched (rows with their last
    step, with ``expire_after`` or a budget's ``marks`` before and after the batch: see
    :func:`classify`)."""
    before, after = (None, None) if marks is None else marks
    old_nonzero, old_steps = classify(rule, params, old_state, old_t, expire_after, before)
    new_nonzero, new_steps = classify(rule, params, new_state, new_t, expire_after, after)
    old_expiring = old_nonzero & np.isfinite(old_steps)
    new_expiring = new_nonzero & np.isfinite(new_steps)
    old_stable, new_stable = old_nonzero & ~old_expiring, new_nonzero & ~new_expiring
    return NonzeroChange(
        leaving=ids[old_expiring],
        entering=ids[new_expiring],
        entering_steps=new_steps[new_expiring],
        stable_delta=int(new_stable.sum() - old_stable.sum()),
        stable_before=old_stable,
        stable_after=new_stable,
        entering_rows=new_expiring,
    )
