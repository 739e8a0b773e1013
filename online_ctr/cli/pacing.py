"""The rate limit of ``online-ctr feed``: a batch is sent no sooner than the examples before
it allow at ``rate`` examples a second, counted from the first batch.

So by any moment ``t`` after the start at most ``rate * t`` examples plus one batch were
sent, and a pause (a slow answer, a retry) is made up by sending the next batches at once,
not by exceeding that bound.

>>> schedule([100, 100, 50, 100], rate=200.0)
[0.0, 0.5, 1.0, 1.25]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable


def schedule(sizes: Iterable[int], rate: float) -> list[float]:
    """The earliest start of each batch of ``sizes``, in seconds after the first."""
    starts, sent = [], 0
    for size in sizes:
        starts.append(sent / rate)
        sent += size
    return starts


class Pacer:
    """Waits before each batch until :func:`schedule` allows it; no rate: never waits."""

    def __init__(
        self,
        rate: float | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate, self._clock, self._sleep = rate, clock, sleep
        self._started: float | None = None
        self._sent = 0

    def wait(self, size: int) -> None:
        """Wait until a batch of ``size`` examples may go, and count it as sent."""
        if self.rate is None:
            return
        now = self._clock()
        if self._started is None:
            self._started = now
        due = self._started + self._sent / self.rate
        if due > now:
            self._sleep(due - now)
        self._sent += size
