"""Pairing two models' units: the ``/learn`` calls both learned, matched by key.

Every model of a group receives the same stream entries in the same order, each learner
reports per entry (a *unit*) its key, its examples and the progressive log loss it had on
them, and two models progress at their own pace. :func:`pair` finds the units two reports
have in common, in stream order, and how far each report is settled: a unit before the last
common one that has no partner was not learned by the other model (dead-lettered there) and
never will be.

>>> champion = Units.of([1, 2, 3, 4], [1, 1, 1, 1], [0.5, 0.4, 0.3, 0.2])
>>> challenger = Units.of([1, 3, 4, 5], [1, 1, 1, 1], [0.4, 0.3, 0.1, 0.9])
>>> matched = pair(champion, challenger)
>>> champion.keys[matched.first].tolist(), matched.first_through, matched.second_through
([1, 3, 4], 4, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Units:
    """Units in stream order: each one's key, its examples and their summed log loss."""

    keys: NDArray[np.uint64]
    examples: NDArray[np.int64]
    losses: NDArray[np.float64]

    @classmethod
    def of(cls, keys: Sequence[int], examples: Sequence[int], losses: Sequence[float]) -> Units:
        return cls(
            np.asarray(keys, np.uint64),
            np.asarray(examples, np.int64),
            np.asarray(losses, np.float64),
        )

    @classmethod
    def empty(cls) -> Units:
        return cls.of([], [], [])

    def __len__(self) -> int:
        return len(self.keys)

    def then(self, later: Units) -> Units:
        """These units followed by ``later``."""
        return Units(
            np.concatenate([self.keys, later.keys]),
            np.concatenate([self.examples, later.examples]),
            np.concatenate([self.losses, later.losses]),
        )

    def tail(self, start: int) -> Units:
        """The units from ``start`` on."""
        return Units(self.keys[start:], self.examples[start:], self.losses[start:])

    def select(self, rows: NDArray[np.intp]) -> Units:
        return Units(self.keys[rows], self.examples[rows], self.losses[rows])


@dataclass(frozen=True)
class Matched:
    """Rows of the common units in each report (stream order), and per report how many of
    its leading units are settled (paired, or passed without a partner)."""

    first: NDArray[np.intp]
    second: NDArray[np.intp]
    first_through: int
    second_through: int


def pair(first: Units, second: Units) -> Matched:
    """The units ``first`` and ``second`` both hold, matched by key in stream order. A key
    twice in one report (the same examples sent twice, without an Idempotency-Key) cannot be
    told apart, and a unit whose loss is not finite is no evidence: neither is paired."""
    a, b = _usable(first), _usable(second)
    _, in_a, in_b = np.intersect1d(first.keys[a], second.keys[b], True, return_indices=True)
    rows_a, rows_b = a[in_a], b[in_b]
    order = np.argsort(rows_a, kind="stable")
    rows_a, rows_b = rows_a[order], rows_b[order]
    in_order = np.diff(rows_b, prepend=-1) > 0  # a collision breaks the order
    rows_a, rows_b = rows_a[in_order], rows_b[in_order]
    if len(rows_a) == 0:
        return Matched(rows_a, rows_b, 0, 0)
    return Matched(rows_a, rows_b, int(rows_a[-1]) + 1, int(rows_b[-1]) + 1)


def _usable(units: Units) -> NDArray[np.intp]:
    """Rows whose key is once in ``units`` and whose loss is finite."""
    _, first_rows, counts = np.unique(units.keys, return_index=True, return_counts=True)
    rows: NDArray[np.intp] = np.sort(first_rows[counts == 1]).astype(np.intp)
    return rows[np.isfinite(units.losses[rows])]
