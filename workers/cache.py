"""A worker's own copy of the state buckets it has read or written.

Every commit moves the model's step, so right after this worker's commit to step ``t`` its
copy of the buckets it knows is exact for as long as the model is still at step ``t`` (and the
same epoch). Then only buckets it has not seen need reading from Redis. The commit script
checks the step anyway, so a stale copy can cost a retry, never a wrong update.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from octr.store.state import Read
from online_ctr.table import StateTable


class StateCache:
    """Rows (rule fields then count) of whole buckets, exact as of ``version``."""

    def __init__(self, width: int, buckets: int, max_features: int) -> None:
        self.max_features = max_features
        self.table = StateTable(width)
        self._mask = np.uint64(buckets - 1)
        self.known = np.zeros(buckets, dtype=bool)
        self.version: tuple[int, str] | None = None

    def unknown(self, buckets: NDArray[np.intp]) -> NDArray[np.intp]:
        """Which of these buckets must be read from Redis."""
        if self.version is None or len(self.table) > self.max_features:
            self.forget()  # also a bound on memory: the next batches re-read what they need
            return buckets
        return buckets[~self.known[buckets]]

    def load(self, read: Read) -> bool:
        """Take in buckets read from Redis; False (and nothing kept) if the model has moved
        since the version the cache holds, so every bucket must be read again."""
        if self.version not in (None, (read.t, read.epoch)):
            self.forget()
            return False
        rows = self.table.rows(read.ids, create=True)  # may reallocate table.data
        self.table.data[rows] = read.rows
        self.known[read.buckets] = True
        self.version = (read.t, read.epoch)
        return True

    def members(self, buckets: NDArray[np.intp]) -> NDArray[np.intp]:
        """Rows of every stored feature (count > 0) of these buckets."""
        size = len(self.table)
        wanted = np.zeros(len(self.known), dtype=bool)
        wanted[buckets] = True
        bucket_of = self.bucket_of(self.table.ids[:size])
        return np.flatnonzero(wanted[bucket_of] & (self.table.data[:size, -1] > 0))

    def bucket_of(self, ids: NDArray[np.uint64]) -> NDArray[np.intp]:
        return (ids & self._mask).astype(np.intp)

    def forget(self) -> None:
        """Nothing here is known to be exact any more."""
        self.table.clear()
        self.known[:] = False
        self.version = None
