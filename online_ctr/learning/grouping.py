"""Grouping a batch's feature occurrences by id in linear time: ``np.unique(ids,
return_inverse=True)``, computed with a hash table instead of a sort of every occurrence.

A worker's group of 65,536 Criteo rows holds about 2.6 million occurrences of about 100,000
distinct ids; ``np.unique`` sorts all 2.6 million, and that sort was two thirds of a worker's
drain. Here one compiled pass over the occurrences finds the distinct ids (the project's
open-addressing table, :func:`online_ctr.learning.hashing.distinct`), and only those are
sorted. The result is exactly ``np.unique``'s:
the same sorted ids and the same inverse, so nothing downstream can tell the two apart.
Below :data:`SMALL` occurrences ``np.unique`` itself is used: the sort is cheap there and
the call costs nothing to load. :func:`distinct_inverse`, which does not sort, always takes
the compiled pass.

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

from online_ctr.learning import hashing

#: Occurrences below which ``np.unique`` is used as it is.
SMALL = 1 << 13


def unique_inverse(ids: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
    """``np.unique(ids, return_inverse=True)`` for a 1-d array of uint64 ids, bit for bit."""
    if len(ids) < SMALL:
        unique, inverse = np.unique(ids, return_inverse=True)
        return unique, inverse.ravel().astype(np.intp, copy=False)
    distinct, first_inverse = hashing.distinct(np.ascontiguousarray(ids, dtype=np.uint64))
    order = np.argsort(distinct)  # ids are distinct: any sort gives the same order
    rank = np.empty(len(order), np.intp)
    rank[order] = np.arange(len(order))
    return distinct[order], rank[first_inverse]


def distinct_inverse(ids: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.intp]]:
    """Like :func:`unique_inverse`, but the distinct ids in no particular order (of first
    occurrence), by the compiled pass at any size: for scoring, which sums each example's
    weights in its own order whatever order the distinct ids are in, the sort of the distinct
    ids is wasted (5% of a batch ``/predict``'s CPU), and for the 40 ids of a single one
    ``np.unique``'s calls cost several times the pass (4% of its CPU in the API)."""
    return hashing.distinct(np.ascontiguousarray(ids, dtype=np.uint64))


def warm_up() -> None:
    """Compile (or load from numba's cache) the grouping pass now, not in a first request."""
    hashing.distinct(np.zeros(1, np.uint64))
