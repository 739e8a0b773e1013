"""Pairing two models' units by key (online_ctr.learning.pairing): stream order, units one
model never learned, keys that cannot be told apart, losses that are no evidence."""

from __future__ import annotations

import numpy as np

from online_ctr.learning.pairing import Units, pair


def units(keys: list[int], losses: list[float] | None = None) -> Units:
    return Units.of(keys, [1] * len(keys), losses or [0.5] * len(keys))


def test_units_both_hold_are_paired_in_stream_order() -> None:
    matched = pair(units([5, 9, 2, 7]), units([9, 2, 7, 11]))
    assert matched.first.tolist() == [1, 2, 3] and matched.second.tolist() == [0, 1, 2]
    assert (matched.first_through, matched.second_through) == (4, 3)


def test_a_unit_the_other_never_learned_is_passed_not_paired() -> None:
    # 9 was dead-lettered by the second model: once 2 is paired, 9 is settled for both.
    matched = pair(units([5, 9, 2]), units([5, 2]))
    assert matched.first.tolist() == [0, 2] and matched.first_through == 3


def test_units_of_a_slower_model_wait() -> None:
    matched = pair(units([1, 2, 3, 4, 5]), units([1, 2]))
    assert matched.first_through == 2 and matched.second_through == 2


def test_a_key_twice_in_a_report_is_not_paired() -> None:
    matched = pair(units([1, 2, 1, 3]), units([1, 2, 3]))
    assert units([1, 2, 1, 3]).keys[matched.first].tolist() == [2, 3]


def test_a_non_finite_loss_is_not_paired() -> None:
    matched = pair(units([1, 2, 3], [0.1, np.nan, 0.3]), units([1, 2, 3], [0.1, 0.2, np.inf]))
    assert matched.first.tolist() == [0]


def test_a_collision_that_breaks_the_order_is_dropped() -> None:
    matched = pair(units([1, 2, 3]), units([1, 3, 2]))
    assert len(matched.first) == 2 and np.all(np.diff(matched.second) > 0)


def test_nothing_in_common() -> None:
    matched = pair(units([1, 2]), Units.empty())
    assert (len(matched.first), matched.first_through, matched.second_through) == (0, 0, 0)
