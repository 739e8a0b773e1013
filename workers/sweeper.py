"""Closing join windows from the learner's loop: due impressions become negatives (or are
dropped) in the stream, so the learner learns them in order with everything else.

``sweep.lua`` is atomic and idempotent, so any worker may run it at any time; the loop runs it
at most every ``interval_s`` and ``run_until_idle`` before each step (deterministic tests).
"""

from __future__ import annotations

import logging
import time

from online_ctr.config.join_policy import JoinPolicy
from online_ctr.metrics import Metrics
from online_ctr.store.impressions import SWEEP_COUNT, Impressions
from online_ctr.store.state import ModelStore

logger = logging.getLogger(__name__)

#: Longest a due window waits for the loop's sweep, in seconds.
SWEEP_INTERVAL_S = 0.1
#: Most sweep calls per :meth:`Sweeper.sweep`: bounds one turn of the loop.
MAX_CALLS = 10


class Sweeper:
    """Closes the due windows of one model's impressions (nothing with joins off)."""

    def __init__(
        self,
        store: ModelStore,
        policy: JoinPolicy,
        metrics: Metrics,
        streams: list[str] | None = None,
        interval_s: float = SWEEP_INTERVAL_S,
    ) -> None:
        keys = store.keys
        # A model of a group closes the group's windows into every model's stream.
        streams = streams or [keys.stream]
        self.impressions = (
            Impressions(store.redis, keys.feedback, streams, policy) if policy.on else None
        )
        self.interval_s = interval_s
        model = store.spec.name
        self._negatives = metrics.unlabeled_impressions.labels(model, "negative")
        self._dropped = metrics.unlabeled_impressions.labels(model, "dropped")
        self._last = float("-inf")

    def follow(self, streams: list[str]) -> None:
        """Close windows into ``streams`` from now on (a model joined or left the group)."""
        if self.impressions is not None:
            self.impressions.streams = streams

    async def sweep_if_due(self) -> int:
        """Sweep unless the last sweep was less than ``interval_s`` ago; windows closed."""
        now = time.monotonic()
        if now - self._last < self.interval_s:
            return 0
        self._last = now
        return await self.sweep()

    async def sweep(self) -> int:
        """Close the windows that are due (up to ``MAX_CALLS`` sweep calls); windows closed."""
        if self.impressions is None:
            return 0
        closed = 0
        for _ in range(MAX_CALLS):
            swept = await self.impressions.sweep(SWEEP_COUNT)
            closed += swept.closed
            self._negatives.inc(swept.negatives)
            self._dropped.inc(swept.closed - swept.negatives)
            if swept.expired:
                logger.warning(
                    "%d impressions expired before their window was swept: no worker swept "
                    "for over a window; they are lost",
                    swept.expired,
                )
            if swept.taken < SWEEP_COUNT:
                break
        return closed
