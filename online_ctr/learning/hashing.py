"""The one open-addressing hash table of the project: linear probing over a power of two of
slots, at most half full, in numpy arrays that compiled code probes.

A table of uint64 keys is two arrays of one length: ``slot_rows`` (a row per slot, -1 for an
empty one) and ``slot_keys`` (the key whose row it is). The key is kept in its slot, so a probe
compares it there; looking it up in the rows' own key array was a second, dependent, cache
miss. Keys are feature ids, hashes already, so their bits pick the slot; the fold of the high
half into the low one keeps apart ids that differ only in their high bits.

:class:`~online_ctr.learning.table.StateTable` (state rows by feature id) and
:func:`~online_ctr.learning.grouping.unique_inverse` (a batch's distinct ids) are this table;
:class:`~service.api.scan.NameIds` and the repeated-field check of :mod:`service.api.scan`
key theirs by byte strings, which they compare themselves, and take the slots and the probe
of their hashes from :func:`hash_slot` and :func:`next_slot`.

Compiled functions of other modules that call the helpers here are cached by numba under
their own source file, which is all numba checks: a change here reaches them once their
file changes too, or numba's cache is cleared (each module's functions stay consistent with
one another meanwhile).

>>> slot_rows, slot_keys = empty_slots(3)
>>> len(slot_rows), len(slot_keys)
(16, 16)
>>> keys = np.array([7, 2**63 + 7, 23], np.uint64)  # the first two differ in the high bit
>>> put_rows(slot_rows, slot_keys, keys, np.arange(3))
>>> find_rows(slot_rows, slot_keys, np.array([23, 2**63 + 7, 8], np.uint64)).tolist()
[2, 1, -1]
>>> unique, inverse = distinct(np.array([9, 4, 9, 9, 2**64 - 1], np.uint64))
>>> unique.tolist(), inverse.tolist()
([9, 4, 18446744073709551615], [0, 1, 0, 0, 2])
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.jit import compiled, inlined

#: Row indexes, and -1 for none: what a table's slots hold and its look-ups answer.
RowIndexes = NDArray[np.intp]
Keys = NDArray[np.uint64]

_S32 = np.uint64(32)


def slot_count(count: int) -> int:
    """The slots a table of ``count`` keys needs to be at most half full: a power of two,
    at least 16."""
    return 1 << max(4, (2 * count - 1).bit_length())


def empty_slots(count: int) -> tuple[RowIndexes, Keys]:
    """The ``slot_rows`` and ``slot_keys`` of an empty table with room for ``count`` keys."""
    slots = slot_count(count)
    return np.full(slots, -1, np.intp), np.zeros(slots, np.uint64)


@inlined
def hash_slot(h: np.uint64, mask: np.uint64) -> np.uint64:
    """The first slot of a well-mixed hash ``h`` in a table of ``mask + 1`` slots.

    Unsigned, as every slot here: an unsigned index spares numba's negative-index
    wrap-around in the probes."""
    return h & mask


@inlined
def key_slot(key: np.uint64, mask: np.uint64) -> np.uint64:
    """The first slot of a uint64 key: its high half folded into its low one."""
    return hash_slot(key ^ (key >> _S32), mask)


@inlined
def next_slot(slot: np.uint64, mask: np.uint64) -> np.uint64:
    """The slot probed after ``slot``: the next one, round to the first after the last."""
    return (slot + np.uint64(1)) & mask


@inlined
def find(slot_rows: RowIndexes, slot_keys: Keys, key: np.uint64) -> np.intp:
    """The row of ``key``, or -1: the empty slot that ends an absent key's probe."""
    mask = np.uint64(len(slot_rows) - 1)
    s = key_slot(key, mask)
    while slot_rows[s] >= 0 and slot_keys[s] != key:
        s = next_slot(s, mask)
    row: np.intp = slot_rows[s]
    return row


@inlined
def put(slot_rows: RowIndexes, slot_keys: Keys, key: np.uint64, row: int) -> None:
    """Give ``key``, absent, the first free slot of its probe, holding ``row``."""
    mask = np.uint64(len(slot_rows) - 1)
    s = key_slot(key, mask)
    while slot_rows[s] >= 0:
        s = next_slot(s, mask)
    slot_rows[s] = row
    slot_keys[s] = key


# One compiled pass per call: a vectorized probe went round by round over the keys still
# probing, with a sort per round to settle which of several keys takes a free slot, and cost
# about a microsecond per new feature (a worker's whole share of a new feature is a few).


@compiled
def find_rows(slot_rows: RowIndexes, slot_keys: Keys, keys: Keys) -> RowIndexes:
    """Each key's row, or -1 if it is absent."""
    rows = np.empty(keys.shape[0], np.intp)
    for j in range(keys.shape[0]):
        rows[j] = find(slot_rows, slot_keys, keys[j])
    return rows


@compiled
def put_rows(slot_rows: RowIndexes, slot_keys: Keys, keys: Keys, rows: RowIndexes) -> None:
    """Put (key, row) pairs, keys absent and distinct, into the table."""
    for j in range(keys.shape[0]):
        put(slot_rows, slot_keys, keys[j], rows[j])


@compiled
def distinct(keys: Keys) -> tuple[Keys, RowIndexes]:
    """The distinct keys in order of first occurrence, and each occurrence's index in them.

    The table starts small and doubles when half full, so it stays the size of the distinct
    keys (which fit in the CPU's caches), not of the occurrences (which would not); for a
    few keys (a single ``/predict``'s) it starts at their size, as allocating and filling
    4,096 slots took most of such a call."""
    n = keys.shape[0]
    size = 16
    while size < 2 * n and size < 1 << 12:
        size *= 2
    slot_rows, slot_keys = np.full(size, -1, np.intp), np.zeros(size, np.uint64)
    unique = np.empty(n, np.uint64)
    inverse = np.empty(n, np.intp)
    k = 0
    for j in range(n):
        # The probe of find and put in one, written out: as an inlined find_or_put it ran
        # 4-10x slower (a batch's 2.4M Criteo occurrences: ~75 ms against 7-17).
        x = keys[j]
        mask = np.uint64(size - 1)
        s = key_slot(x, mask)
        while True:
            row = slot_rows[s]
            if row < 0:
                slot_rows[s], slot_keys[s] = k, x
                unique[k], inverse[j] = x, k
                k += 1
                if 2 * k > size:
                    size *= 2
                    slot_rows, slot_keys = np.full(size, -1, np.intp), np.zeros(size, np.uint64)
                    for r in range(k):
                        put(slot_rows, slot_keys, unique[r], r)
                break
            if slot_keys[s] == x:
                inverse[j] = row
                break
            s = next_slot(s, mask)
    return unique[:k], inverse


def warm_up() -> None:
    """Compile (or load from numba's cache) the table's passes now, not in a first batch."""
    slot_rows, slot_keys = empty_slots(1)
    put_rows(slot_rows, slot_keys, np.zeros(1, np.uint64), np.zeros(1, np.intp))
    find_rows(slot_rows, slot_keys, np.zeros(1, np.uint64))
    distinct(np.zeros(1, np.uint64))
