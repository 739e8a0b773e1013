"""Grouping a batch's feature occurrences by id in linear time: ``np.unique(ids,
return_inverse=True)``, computed with a hash table instead of a sort of every occurrence.

A worker's group of 65,536 Criteo rows holds about 2.6 million occurrences of about 100,000
distinct ids; ``np.unique`` sorts all 2.6 million, and that sort was two thirds of a worker's
drain. Here one compiled pass over the occurrences finds the distinct ids (an open-addressing
table, linear probing), and only those are sorted. The result is exactly ``np.unique``'s:
the same sorted ids and the same inverse, so nothing downstream can tell the two apart.
Below :data:`SMALL` occurrences (a single ``/predict``) ``np.unique`` itself is used: the
sort is cheap there and the call costs nothing to load.

>>> ids = np.array([7, 3, 7, 9, 3], np.uint64)
>>> unique_inverse(ids)
(array([3, 7, 9], dtype=uint64), array([1, 0, 1, 2, 0]))
>>> unique, inverse = unique_inverse(np.tile(ids, SMALL))  # the compiled pass
>>> unique.tolist(), inverse[:5].tolist()
([3, 7, 9], [1, 0, 1, 2, 0])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.kernels import compiled, helper

#: Occurrences below which ``np.unique`` is used as it is.
SMALL = 1 << 13


@compiled
def _distinct(ids: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
    """The distinct ids in order of first occurrence, and each occurrence's index in them.

    The table starts small and doubles when half full, so it stays the size of the distinct
    ids (which fit in the CPU's caches), not of the occurrences (which would not)."""
    n = ids.shape[0]
    size = 1 << 12
    slot_row = np.full(size, -1, np.intp)
    distinct = np.empty(n, np.uint64)
    inverse = np.empty(n, np.intp)
    k = 0
    for j in range(n):
        x = ids[j]
        s = _slot(x, size)
        while True:
            row = slot_row[s]
            if row < 0:
                slot_row[s] = k
                distinct[k] = x
                inverse[j] = k
                k += 1
                if 2 * k > size:
                    size *= 2
                    slot_row = _rehash(distinct, k, size)
                break
            if distinct[row] == x:
                inverse[j] = row
                break
            s = (s + 1) & (size - 1)
    return distinct[:k], inverse


@helper
def _slot(x: np.uint64, size: int) -> np.intp:
    # Ids are hashes already; the fold only guards against ids that differ in high bits.
    return np.intp((x ^ (x >> np.uint64(32))) & np.uint64(size - 1))


@helper
def _rehash(distinct: NDArray[np.uint64], k: int, size: int) -> NDArray[np.intp]:
    """A table of ``size`` slots holding the first ``k`` distinct ids."""
    slot_row = np.full(size, -1, np.intp)
    for row in range(k):
        s = _slot(distinct[row], size)
        while slot_row[s] >= 0:
            s = (s + 1) & (size - 1)
        slot_row[s] = row
    return slot_row


def unique_inverse(ids: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
    """``np.unique(ids, return_inverse=True)`` for a 1-d array of uint64 ids, bit for bit."""
    if len(ids) < SMALL:
        unique, inverse = np.unique(ids, return_inverse=True)
        return unique, inverse.ravel().astype(np.intp, copy=False)
    distinct, first_inverse = _distinct(np.ascontiguousarray(ids, dtype=np.uint64))
    order = np.argsort(distinct)  # ids are distinct: any sort gives the same order
    rank = np.empty(len(order), np.intp)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[first_inverse]


def distinct_inverse(ids: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
    """Like :func:`unique_inverse`, but the distinct ids in no particular order: for scoring,
    which sums each example's weights in its own order whatever order the distinct ids are
    in, the sort of the distinct ids is wasted (5% of a batch ``/predict``'s CPU)."""
    if len(ids) < SMALL:
        return unique_inverse(ids)
    return _distinct(np.ascontiguousarray(ids, dtype=np.uint64))


def warm_up() -> None:
    """Compile (or load from numba's cache) the grouping pass now, not in a first request."""
    _distinct(np.zeros(1, np.uint64))
