"""Rows of per-feature state by 64-bit feature id, looked up a whole batch at a time.

An open-addressing hash table (linear probing) held in numpy arrays: looking up or inserting
the k distinct features of a batch is a handful of vectorized probes, not k dict operations.
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

    def _probe(self, ids: NDArray[np.uint64]) -> Rows:
        """Each id's row, or -1 if absent."""
        mask = len(self._slot_rows) - 1
        slots = (ids & np.uint64(mask)).astype(np.intp)
        rows = np.full(len(ids), -1, dtype=np.intp)
        pending = np.arange(len(ids))
        while len(pending):
            at = slots[pending]
            occupant = self._slot_rows[at]
            hit = (occupant >= 0) & (self._slot_ids[at] == ids[pending])
            rows[pending[hit]] = occupant[hit]
            keep_probing = (occupant >= 0) & ~hit
            pending = pending[keep_probing]
            slots[pending] = (slots[pending] + 1) & mask
        return rows

    def _insert(self, ids: NDArray[np.uint64]) -> Rows:
        """Give distinct absent ids new rows; returns them."""
        if 2 * (self._size + len(ids)) > len(self._slot_rows):
            self._grow(self._size + len(ids))
        new_rows = np.arange(self._size, self._size + len(ids), dtype=np.intp)
        self._reserve(self._size + len(ids))
        self.ids[new_rows] = ids
        self.data[new_rows] = 0.0
        self._size += len(ids)
        self._place(ids, new_rows)
        return new_rows

    def _place(self, ids: NDArray[np.uint64], rows: Rows) -> None:
        """Write (id, row) pairs into empty slots; ids that want the same slot take turns."""
        mask = len(self._slot_rows) - 1
        slots = (ids & np.uint64(mask)).astype(np.intp)
        pending = np.arange(len(ids))
        while len(pending):
            at = slots[pending]
            free = self._slot_rows[at] < 0
            # Of several ids probing the same free slot, the first one gets it.
            _, first = np.unique(at, return_index=True)
            winner = np.zeros(len(pending), dtype=bool)
            winner[first] = True
            take = free & winner
            self._slot_rows[at[take]] = rows[pending[take]]
            self._slot_ids[at[take]] = ids[pending[take]]
            pending = pending[~take]
            blocked = ~free[~take]
            slots[pending[blocked]] = (slots[pending[blocked]] + 1) & mask

    def _grow(self, needed: int) -> None:
        """Rehash into a slot array at least four times ``needed``."""
        slots = 1 << (4 * needed - 1).bit_length()
        self._slot_rows = np.full(slots, -1, dtype=np.intp)
        self._slot_ids = np.zeros(slots, dtype=np.uint64)
        self._place(self.ids[: self._size], np.arange(self._size, dtype=np.intp))

    def _reserve(self, size: int) -> None:
        if size > len(self.ids):
            capacity = max(size, 2 * len(self.ids))
            self.ids = np.resize(self.ids, capacity)
            grown = np.zeros((capacity, self.width))
            grown[: self._size] = self.data[: self._size]
            self.data = grown
