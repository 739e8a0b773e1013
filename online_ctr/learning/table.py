"""Rows of per-feature state by 64-bit feature id, looked up a whole batch at a time.

An open-addressing hash table (linear probing) held in numpy arrays: looking up or inserting
the k distinct features of a batch is one compiled pass over them, not k dict operations.
Feature ids are already uniform hashes, so their low bits pick the slot.

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

from online_ctr.learning.kernels import compiled

Rows = NDArray[np.intp]


class StateTable:
    """``width`` float64 values per feature id; new rows start at zero."""

    def __init__(self, width: int, capacity: int = 1024) -> None:
        self.width = width
        self.clear(capacity)

    def clear(self, capacity: int = 1024) -> None:
        """Forget every row."""
        slots = 1 << max(4, (2 * capacity - 1).bit_length())
        self._slot_rows = np.full(slots, -1, dtype=np.intp)
        self._slot_ids = np.zeros(slots, dtype=np.uint64)
        self.ids = np.zeros(capacity, dtype=np.uint64)
        self.data = np.zeros((capacity, self.width))
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def rows(self, ids: NDArray[np.uint64], create: bool) -> Rows:
        """Row of each id; unknown ids get new zero rows if ``create`` (ids must then be
        distinct), else -1."""
        rows = self._probe(ids)
        if create:
            new = rows < 0
            if new.any():
                rows[new] = self._insert(ids[new])
        return rows

    def keep(self, rows: Rows) -> None:
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
        _put_rows(self._slot_rows, self._slot_ids, self.ids[:count], np.arange(count))

    def _probe(self, ids: NDArray[np.uint64]) -> Rows:
        """Each id's row, or -1 if absent."""
        return _find_rows(self._slot_rows, self._slot_ids, np.ascontiguousarray(ids, np.uint64))

    def _insert(self, ids: NDArray[np.uint64]) -> Rows:
        """Give distinct absent ids new rows; returns them."""
        if 2 * (self._size + len(ids)) > len(self._slot_rows):
            self._grow(self._size + len(ids))
        new_rows = np.arange(self._size, self._size + len(ids), dtype=np.intp)
        self._reserve(self._size + len(ids))
        self.ids[new_rows] = ids
        self.data[new_rows] = 0.0
        self._size += len(ids)
        _put_rows(self._slot_rows, self._slot_ids, np.ascontiguousarray(ids, np.uint64), new_rows)
        return new_rows

    def _grow(self, needed: int) -> None:
        """Rehash into a slot array at least four times ``needed``."""
        slots = 1 << (4 * needed - 1).bit_length()
        self._slot_rows = np.full(slots, -1, dtype=np.intp)
        self._slot_ids = np.zeros(slots, dtype=np.uint64)
        _put_rows(self._slot_rows, self._slot_ids, self.ids[: self._size], np.arange(self._size))

    def _reserve(self, size: int) -> None:
        if size > len(self.ids):
            capacity = max(size, 2 * len(self.ids))
            self.ids = np.resize(self.ids, capacity)
            grown = np.zeros((capacity, self.width))
            grown[: self._size] = self.data[: self._size]
            self.data = grown


# One compiled pass per call: a vectorized probe went round by round over the ids still
# probing, with a sort per round to settle which of several ids takes a free slot, and cost
# about a microsecond per new feature (a worker's whole share of a new feature is a few).


@compiled
def _find_rows(slot_rows: Rows, slot_ids: NDArray[np.uint64], ids: NDArray[np.uint64]) -> Rows:
    mask = slot_rows.shape[0] - 1
    rows = np.empty(ids.shape[0], np.intp)
    for j in range(ids.shape[0]):
        x = ids[j]
        s = np.intp(x & np.uint64(mask))
        while slot_rows[s] >= 0 and slot_ids[s] != x:
            s = (s + 1) & mask
        rows[j] = slot_rows[s]  # -1 at the empty slot that ends an absent id's probe
    return rows


@compiled
def _put_rows(
    slot_rows: Rows, slot_ids: NDArray[np.uint64], ids: NDArray[np.uint64], rows: Rows
) -> None:
    """Put (id, row) pairs, ids absent and distinct, into the first free slot of each probe."""
    mask = slot_rows.shape[0] - 1
    for j in range(ids.shape[0]):
        s = np.intp(ids[j] & np.uint64(mask))
        while slot_rows[s] >= 0:
            s = (s + 1) & mask
        slot_rows[s] = rows[j]
        slot_ids[s] = ids[j]


@compiled
def _compact(ids: NDArray[np.uint64], data: NDArray[np.float64], rows: Rows) -> None:
    """Move ``rows`` (ascending) to the front of ``ids`` and ``data``, in order: row
    ``rows[i]`` is at or after ``i``, so no row is overwritten before it has moved."""
    for i in range(rows.shape[0]):
        ids[i] = ids[rows[i]]
        data[i, :] = data[rows[i], :]


def warm_up() -> None:
    """Compile (or load from numba's cache) the table's passes now, not in a first batch."""
    table = StateTable(1)
    table.keep(table.rows(np.zeros(1, np.uint64), create=True))
