"""Rows of per-feature state by 64-bit feature id, looked up a whole batch at a time.

The project's open-addressing hash table (:mod:`online_ctr.learning.hashing`) from ids to
rows: looking up or inserting the k distinct features of a batch is one compiled pass over
them, not k dict operations.

>>> table = StateTable(width=2)
>>> ids = np.array([7, 2**63 + 5, 42], dtype=np.uint64)
>>> rows = table.rows(ids, create=True)
>>> table.data[rows] = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
>>> table.rows(np.array([42, 9], dtype=np.uint64), create=False).tolist()
[2, -1]
>>> len(table), table.data[table.rows(ids[:1], create=False)].tolist()
(3, [[1.0, 2.0]])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning import hashing
from online_ctr.learning.hashing import RowIndexes
from online_ctr.learning.jit import compiled


class StateTable:
    """``width`` float64 values per feature id; new rows start at zero."""

    def __init__(self, width: int, capacity: int = 1024) -> None:
        self.width = width
        self.clear(capacity)

    def clear(self, capacity: int = 1024) -> None:
        """Forget every row."""
        self._slot_rows, self._slot_ids = hashing.empty_slots(capacity)
        self.ids = np.zeros(capacity, dtype=np.uint64)
        self.data = np.zeros((capacity, self.width))
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def rows(self, ids: NDArray[np.uint64], create: bool) -> RowIndexes:
        """Row of each id; unknown ids get new zero rows if ``create`` (ids must then be
        distinct), else -1."""
        rows = self._probe(ids)
        if create:
            new = rows < 0
            if new.any():
                rows[new] = self._insert(ids[new])
        return rows

    def state_of(
        self, ids: NDArray[np.uint64], absent: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], RowIndexes]:
        """A copy of the state of ``ids`` (the row ``absent`` for an id not here), and each
        id's row as :meth:`rows` gives it: one compiled pass where the probe, masks and fancy
        indexing made eight numpy calls."""
        return _state_of(self._slot_rows, self._slot_ids, self.data, ids, absent)

    def keep(self, rows: RowIndexes) -> None:
        """Keep only ``rows`` (distinct), each moved down to the next free place in row order.

        In the arrays the table has, which keep their length: a cache trimmed this way
        allocates nothing the size of the table, so the trim pays no page faults (a rebuild
        in new arrays doubled its time), and the way back up needs no growth."""
        kept = np.zeros(self._size, np.bool_)
        kept[rows] = True
        moved = np.flatnonzero(kept)
        _compact(self.ids, self.data, moved)
        count = self._size = len(moved)
        self._slot_rows.fill(-1)
        hashing.put_rows(self._slot_rows, self._slot_ids, self.ids[:count], np.arange(count))

    def _probe(self, ids: NDArray[np.uint64]) -> RowIndexes:
        """Each id's row, or -1 if absent."""
        ids = np.ascontiguousarray(ids, np.uint64)
        return hashing.find_rows(self._slot_rows, self._slot_ids, ids)

    def _insert(self, ids: NDArray[np.uint64]) -> RowIndexes:
        """Give distinct absent ids new rows; returns them."""
        if 2 * (self._size + len(ids)) > len(self._slot_rows):
            self._grow(self._size + len(ids))
        new_rows = np.arange(self._size, self._size + len(ids), dtype=np.intp)
        self._reserve(self._size + len(ids))
        self.ids[new_rows] = ids
        self.data[new_rows] = 0.0
        self._size += len(ids)
        ids = np.ascontiguousarray(ids, np.uint64)
        hashing.put_rows(self._slot_rows, self._slot_ids, ids, new_rows)
        return new_rows

    def _grow(self, needed: int) -> None:
        """Rehash into a table with room for twice ``needed`` (at most a quarter full)."""
        self._slot_rows, self._slot_ids = hashing.empty_slots(2 * needed)
        ids = self.ids[: self._size]
        hashing.put_rows(self._slot_rows, self._slot_ids, ids, np.arange(self._size))

    def _reserve(self, size: int) -> None:
        if size > len(self.ids):
            capacity = max(size, 2 * len(self.ids))
            self.ids = np.resize(self.ids, capacity)
            grown = np.zeros((capacity, self.width))
            grown[: self._size] = self.data[: self._size]
            self.data = grown


@compiled
def _compact(ids: NDArray[np.uint64], data: NDArray[np.float64], rows: RowIndexes) -> None:
    """Move ``rows`` (ascending) to the front of ``ids`` and ``data``, in order: row
    ``rows[i]`` is at or after ``i``, so no row is overwritten before it has moved."""
    for i in range(rows.shape[0]):
        ids[i] = ids[rows[i]]
        data[i, :] = data[rows[i], :]


@compiled
def _state_of(
    slot_rows: RowIndexes,
    slot_ids: NDArray[np.uint64],
    data: NDArray[np.float64],
    ids: NDArray[np.uint64],
    absent: NDArray[np.float64],
) -> tuple[NDArray[np.float64], RowIndexes]:
    rows = np.empty(ids.shape[0], np.intp)
    out = np.empty((ids.shape[0], data.shape[1]))
    for i in range(ids.shape[0]):
        rows[i] = row = hashing.find(slot_rows, slot_ids, ids[i])
        out[i, :] = data[row, :] if row >= 0 else absent
    return out, rows


def warm_up() -> None:
    """Compile (or load from numba's cache) the table's passes now, not in a first batch."""
    hashing.warm_up()
    table = StateTable(1)
    table.keep(table.rows(np.zeros(1, np.uint64), create=True))
    table.state_of(np.array([0, 1], np.uint64), np.zeros(1))
