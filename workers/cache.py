"""A worker's own copy of the state rows it last read or wrote.

Every commit moves the model's step, so right after this worker's commit to step ``t`` its
copy of the rows it wrote is exact for as long as the model is still at step ``t`` (and the
same epoch). Then only features it has not seen need reading from Redis. The commit script
checks the step anyway, so a stale copy can cost a retry, never a wrong update.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from online_ctr.rules.base import Array
from online_ctr.table import StateTable
from service.store.state import Read


class StateCache:
    """Rows (rule fields then count) by feature id, exact as of ``(t, epoch)``."""

    def __init__(self, width: int, max_features: int) -> None:
        self.max_features = max_features
        self.table = StateTable(width)
        self.version: tuple[int, str] | None = None

    def rows(self, ids: NDArray[np.uint64]) -> NDArray[np.intp]:
        """Rows of the cached ids, -1 for the others (all of them while nothing is exact)."""
        if self.version is None:
            return np.full(len(ids), -1, dtype=np.intp)
        return self.table.rows(ids, create=False)

    def matches(self, read: Read) -> bool:
        """Whether the model is still at the step and epoch the cache is exact for."""
        return self.version == (read.t, read.epoch)

    def remember(self, ids: NDArray[np.uint64], state: Array, t: int, epoch: str) -> None:
        """Keep the rows just committed, now exact as of step ``t``."""
        if len(self.table) + len(ids) > self.max_features:
            self.table.clear()  # a bound on memory: the next batches re-read what they need
        rows = self.table.rows(ids, create=True)  # may reallocate table.data
        self.table.data[rows] = state
        self.version = (t, epoch)

    def forget(self) -> None:
        """Someone else committed: nothing here is known to be exact any more."""
        self.table.clear()
        self.version = None
