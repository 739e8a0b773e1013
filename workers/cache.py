"""The learner's own exact copy of the state of the features it has read or written.

While a worker holds the model's lease nobody else writes the state, so every row it has
read or written stays exact: only features it has never seen (or has dropped) are read from
Redis. Memory is bounded by ``max_features``: past it, the least recently used half is
dropped (and re-read from Redis when needed again), so the cost of a trim is amortized over
the ``max_features / 2`` new features that cause the next one. A trim keeps the arrays the
table grew to (room for about twice ``max_features`` rows, which the group that passes the
bound needs anyway): it allocates nothing, so the learner waits half as long. Losing the
lease, or any Redis trouble, empties the copy: it is exact only under an unbroken lease.

>>> cache = StateCache(width=2, max_features=4)
>>> rows = cache.insert(np.array([7, 9], np.uint64), np.ones((2, 2)), np.array([True, False]))
>>> cache.find(np.array([9, 8], np.uint64)).tolist(), cache.stored(rows).tolist()
([1, -1], [True, False])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.hashing import RowIndexes
from online_ctr.learning.rules.base import Array
from online_ctr.learning.table import StateTable


class StateCache:
    """Rows of rule fields, then two bookkeeping columns: stored in Redis (0/1), last use."""

    def __init__(self, width: int, max_features: int) -> None:
        self.width = width
        self.max_features = max_features
        self.table = StateTable(width + 2)
        self.uses = 0

    def __len__(self) -> int:
        return len(self.table)

    def find(self, ids: NDArray[np.uint64]) -> RowIndexes:
        """Each id's row, or -1 where not cached."""
        return self.table.rows(ids, create=False)

    def insert(
        self, ids: NDArray[np.uint64], state: Array, stored: NDArray[np.bool_]
    ) -> RowIndexes:
        """Cache distinct, absent ids with their state as read; returns their rows."""
        rows = self.table.rows(ids, create=True)
        self.table.data[rows, : self.width] = state
        self.table.data[rows, self.width] = stored
        return rows

    def state(self, rows: RowIndexes) -> Array:
        return self.table.data[rows, : self.width]

    def stored(self, rows: RowIndexes) -> NDArray[np.bool_]:
        stored: NDArray[np.bool_] = self.table.data[rows, self.width] > 0
        return stored

    def update(
        self, rows: RowIndexes, state: Array, deleted: NDArray[np.bool_] | None = None
    ) -> None:
        """Rows just committed: their new state, now stored (but ``deleted`` ones), used now."""
        self.uses += 1
        data = self.table.data
        data[rows, : self.width] = state
        data[rows, self.width] = 1.0 if deleted is None else ~deleted
        data[rows, self.width + 1] = self.uses

    def trim(self) -> None:
        """Past ``max_features``, keep only the most recently used half."""
        size = len(self.table)
        if size <= self.max_features:
            return
        keep = self.max_features // 2
        last_use = self.table.data[:size, self.width + 1]
        newest = np.argpartition(last_use, size - keep)[size - keep :] if keep else None
        self.table.keep(np.zeros(0, np.intp) if newest is None else newest)

    def forget(self) -> None:
        """Nothing here is known to be exact any more."""
        self.table.clear()
