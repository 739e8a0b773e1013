"""Recording a model's feature names off the request path.

The hashers put a name in the model's :class:`NameRecorder` (a
:class:`~online_ctr.learning.new_names.NewNames`) the first time this process hashes it, so a
request whose names were all seen before adds nothing. The first name added while no
recording is under way starts one background task; it runs once the request's code yields
(at its own Redis call, which is sent first), and sends what is waiting to
``feature_names.lua``, a thousand names per call. The request never waits for it: its cost on
the request path is one list append per new name. A name whose recording fails (Redis down)
is counted as refused and not retried until the process hashes it again (after its tables
start again empty).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from online_ctr.config.settings import Settings
from online_ctr.learning.new_names import NewNames
from online_ctr.metrics import Metrics
from online_ctr.store.feature_names import FeatureNames
from online_ctr.store.redis_types import RedisClient
from service.api.served import ServedModel

logger = logging.getLogger(__name__)

#: Names waiting to be recorded, per model, in one process: past it they are dropped (and
#: counted), so a burst of new names while Redis is slow holds bounded memory (~100 B each).
MOST_WAITING = 100_000


class NameRecorder(NewNames):
    """New names of one model, sent to its record in the background; ``refused``: the metric
    child that counts names not recorded."""

    def __init__(self, record: FeatureNames, refused: Any) -> None:
        super().__init__(MOST_WAITING)
        self.record = record
        self.refused = refused
        self._task: asyncio.Task[None] | None = None

    def add(self, feature_id: int, name: str) -> None:
        super().add(feature_id, name)
        self._kick()

    def extend(self, ids: Sequence[int], names: Sequence[bytes]) -> None:
        super().extend(ids, names)
        self._kick()

    def _kick(self) -> None:
        if self._task is None:
            # Hashed outside an event loop (RuntimeError): sent by the next flush instead.
            with contextlib.suppress(RuntimeError):
                self._task = asyncio.get_running_loop().create_task(self._run())

    async def flush(self) -> None:
        """Record everything waiting now (and wait for a recording under way)."""
        if self._task is not None:
            await asyncio.shield(self._task)
        await self._record()

    async def _run(self) -> None:
        try:
            await self._record()
        finally:
            self._task = None

    async def _record(self) -> None:
        while len(self):
            ids, names = self.drain()
            try:
                done = await self.record.record(ids, names)
                refused = done.refused
            except Exception as error:  # Redis's: the names are lost, not the request
                logger.warning("feature names not recorded (%s): %d names", error, len(ids))
                refused = len(ids)
            dropped = self.take_dropped()
            if refused + dropped:
                self.refused.inc(refused + dropped)


def record_names(
    served: ServedModel, redis: RedisClient, settings: Settings, metrics: Metrics
) -> None:
    """Make ``served`` record the names its hasher hashes for the first time."""
    record = FeatureNames(redis, served.store.keys, settings.feature_names_max)
    refused = metrics.feature_names_refused.labels(served.name)
    served.hasher.new_names = NameRecorder(record, refused)


def recorder_of(served: ServedModel) -> NameRecorder | None:
    """The recorder of ``served``'s names; None if it records none."""
    found = served.hasher.new_names
    return found if isinstance(found, NameRecorder) else None


def forget_names(served: ServedModel) -> None:
    """After the model's record was deleted: forget which names were hashed, so that they are
    recorded again as they come."""
    if recorder_of(served) is not None:
        served.hasher.forget()
        served.names.forget()
        served.learn_names.forget()
