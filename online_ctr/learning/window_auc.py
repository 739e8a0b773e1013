"""Exact AUC of the last ``W`` progressive predictions of a stream, in bounded memory.

:class:`~online_ctr.learning.stream_metrics.StreamMetrics` keeps every prediction, which suits a
replay
of a file but not a service that learns for months. Here a ring buffer keeps the last
``size`` pairs (probability float64, label uint8: 9 bytes an example, allocated once), each
new batch overwriting the oldest; :meth:`AucWindow.auc` is
:func:`~online_ctr.learning.stream_metrics.auc` over what it holds. AUC depends on the pairs, not on
their order, so the ring is never unrolled.

The buffer is written in place rather than copied per batch (as the frozen
:class:`~online_ctr.learning.calibration.Histogram` is): a copy would cost ``O(W)`` at every commit,
the write costs ``O(batch)``. The AUC sorts ``W`` values, so a caller computes it seldom.

Which probability a pair holds is the caller's: the learner's progressive prediction, or
one served earlier for the same example.

>>> window = AucWindow(4)
>>> window.add([0.9, 0.1, 0.8], [1, 0, 0])
>>> window.add([0.7, 0.2], [1, 1])  # 0.9 (a click) falls out of the window
>>> len(window), window.seen, window.auc()
(4, 5, 0.5)
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from online_ctr.learning.stream_metrics import auc


class AucWindow:
    """The last ``size`` (probability, label) pairs added, with their exact ROC AUC."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self._p = np.empty(size, dtype=np.float64)
        self._y = np.empty(size, dtype=np.uint8)
        self._end = 0  # where the next pair goes
        self._held = 0
        #: Pairs added since the window was made or cleared, those overwritten included.
        self.seen = 0

    def __len__(self) -> int:
        return self._held

    def add(self, probabilities: ArrayLike, labels: ArrayLike) -> None:
        """Append a batch in stream order (labels 0 or 1); the oldest pairs make room."""
        p = np.asarray(probabilities, dtype=np.float64)
        y = np.asarray(labels)
        if not p.ndim == y.ndim == 1 or len(p) != len(y):
            raise ValueError(f"need two 1-d arrays of one length, got {p.shape, y.shape}")
        if np.count_nonzero(y == 1) + np.count_nonzero(y == 0) != len(y):
            raise ValueError("labels must be 0 or 1")
        self.seen += len(p)
        p, y = p[-self.size :], y[-self.size :]  # a batch longer than the window: its tail
        first = min(len(p), self.size - self._end)  # up to the end of the buffer, then wrap
        rest = len(p) - first
        self._p[self._end : self._end + first], self._p[:rest] = p[:first], p[first:]
        self._y[self._end : self._end + first], self._y[:rest] = y[:first], y[first:]
        self._end = (self._end + len(p)) % self.size
        self._held = min(self.size, self._held + len(p))

    def auc(self) -> float:
        """Exact AUC of the pairs held (ties count one half); ``nan`` without both labels."""
        # Until the ring is full the pairs are its first ``_held`` slots; then all of them.
        return auc(self._p[: self._held], self._y[: self._held])

    def clear(self) -> None:
        """Forget every pair (the predictions were another learner's)."""
        self._end = self._held = self.seen = 0
