"""The worker's progressive AUC gauge: the exact AUC of its last ``W`` predictions, published
at most once per interval (it sorts ``W`` values, too much for every small commit).

The series exists only while the AUC is defined. Until the window holds both labels the
gauge is absent rather than NaN: prometheus_client would export a NaN as is, Prometheus would
store it and every panel and aggregation over it would read NaN. It is removed too when the
worker stops leading, so a standby never exports an AUC that is no longer the learner's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from numpy.typing import ArrayLike
from prometheus_client import Gauge

from online_ctr.learning.window_auc import AucWindow


class ProgressiveAuc:
    """A worker's AUC window and its gauge for one model."""

    def __init__(
        self,
        gauge: Gauge,
        model: str,
        window: int,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = AucWindow(window)
        self._gauge = gauge
        self._model = model
        self._interval_s = interval_s
        self._clock = clock
        self._published_at = -math.inf
        self._unpublished = False  # pairs added since the gauge was last set

    def add(self, probabilities: ArrayLike, labels: ArrayLike) -> None:
        """Record a committed group's predictions, in stream order, and publish if due."""
        self.window.add(probabilities, labels)
        self._unpublished = True
        self.publish()

    def publish(self, force: bool = False) -> None:
        """Set the gauge if there is something new and the interval has passed (or ``force``)."""
        now = self._clock()
        due = force or now - self._published_at >= self._interval_s
        if not (self._unpublished and due):
            return
        value = self.window.auc()
        if math.isnan(value):
            self._gauge.remove(self._model)  # a no-op when absent already
        else:
            self._gauge.labels(model=self._model).set(value)
        self._published_at, self._unpublished = now, False

    def forget(self) -> None:
        """Empty the window and drop the series: the predictions were another leader's."""
        self.window.clear()
        self._gauge.remove(self._model)
        self._unpublished = False
