"""Running concurrent calls together: the requests that arrive while passes are busy are
scored as the next pass, in one go.

Under load this turns N concurrent ``/predict`` requests into one feature-hashing pass, one
Redis round trip and one numpy pass instead of N of each (the fixed costs of a round trip and of
numpy calls dwarf the per-example work for one example). Alone, a request waits for nothing but
its own pass, which it runs itself: no task, no future, no turn of the event loop between the
request and its pass (about 10% of a lone ``/predict``'s CPU in the API). It is group commit,
applied to reads. A few passes may be in flight at once, so that the process computes the next
pass while Redis answers the previous one.

A pass that asks Redis nothing (the API's copy holds what it needs) ends without yielding to
the event loop, so nobody arrives while it runs: under load each request would have a pass of
its own. So where the server holds other requests when one is submitted (``others``: their
tasks are made, and run in this turn of the event loop), it is not run alone: its pass starts
in a task of its own, after theirs, and takes those of them submitted by then. Only a small
item waits so (``alone_from``): a large one's pass is mostly its own work already, and sharing
a pass with others costs it more than the fixed costs it saves.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class Coalescer(Generic[In, Out]):
    """Calls ``run(items)`` on the items submitted meanwhile, up to ``in_flight`` at a time.

    ``size(item)`` is an item's weight in ``max_batch`` (examples, here): a pass takes items
    until that is reached, so one pass (and one Lua script in Redis) stays bounded, and passes
    start only while those in flight hold less than that. A pass that fails fails the items
    waiting for the next one too. ``others()`` says whether requests other than the caller's
    are in progress (:class:`service.connections.RequestsInProgress`); never, by default. An
    item of size ``alone_from`` or more (none, by default) runs alone when nothing is in
    flight, others or not.
    """

    def __init__(
        self,
        run: Callable[[list[In]], Awaitable[Sequence[Out]]],
        size: Callable[[In], int],
        max_batch: int,
        in_flight: int,
        others: Callable[[], bool] = lambda: False,
        alone_from: float = math.inf,
    ) -> None:
        self._run = run
        self._others = others
        self._alone_from = alone_from
        self._size = size
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._pending: list[tuple[In, asyncio.Future[Out]]] = []
        self._drainers: set[asyncio.Task[None]] = set()
        self._starting = False  # a drainer is scheduled and will take what is pending
        self._busy = 0  # the size of the items in passes now in flight
        self._alone = 0  # passes in flight that their one submitter runs itself (0 or 1)

    async def submit(self, item: In) -> Out:
        """The result of ``item``, computed in the next pass."""
        nothing = not (self._busy or self._pending or self._starting or self._drainers)
        if nothing and (self._size(item) >= self._alone_from or not self._others()):
            return await self._run_alone(item)  # nothing in flight: its pass starts now
        future: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        # Another pass only while those in flight add up to less than a full one: many small
        # passes overlap Redis's latency, but big ones would only queue inside Redis (it runs
        # one script at a time) and wait there against the socket timeout.
        idle = not self._starting and self._busy < self._max_batch
        if idle and len(self._drainers) + self._alone < self._in_flight:
            self._start_drainer()
        return await future

    async def _run_alone(self, item: In) -> Out:
        """The pass of ``item`` alone, in the submitter's own task: cancelling it cancels
        only its own pass. The items submitted meanwhile get passes of their own, as they
        would beside a drainer's; if this pass fails, those still waiting fail with it."""
        size = self._size(item)
        self._busy += size
        self._alone += 1
        try:
            (result,) = await self._run([item])
        except Exception as error:
            failed, self._pending = self._pending, []
            for _, future in failed:
                if not future.done():
                    future.set_exception(error)
            raise
        finally:
            self._busy -= size
            self._alone -= 1
            # Items that waited for a free pass start now (a drainer in flight takes them
            # when its pass ends, as it would have).
            if self._pending and not (self._starting or self._drainers):
                self._start_drainer()
        return result

    def _start_drainer(self) -> None:
        # A task of its own, not a submitter's: a request that is cancelled must not cancel
        # the pass other requests are waiting on.
        self._starting = True
        drainer = asyncio.create_task(self._drain())
        self._drainers.add(drainer)
        drainer.add_done_callback(self._drainers.discard)

    def _take(self) -> tuple[list[tuple[In, asyncio.Future[Out]]], int]:
        """The next pass's items (at least one) and their total size."""
        total, count = 0, 0
        for item, _ in self._pending:
            size = self._size(item)
            if count and total + size > self._max_batch:
                break
            total += size
            count += 1
        taken, self._pending = self._pending[:count], self._pending[count:]
        return taken, total

    async def _drain(self) -> None:
        self._starting = False
        while self._pending:
            batch, size = self._take()
            self._busy += size
            try:
                results = await self._run([item for item, _ in batch])
            except asyncio.CancelledError:
                for _, future in batch + self._pending:
                    future.cancel()
                raise
            except Exception as error:
                # The requests queued meanwhile fail with it rather than wait for a pass of
                # their own: when Redis hangs, nobody should wait more than one timeout.
                failed, self._pending = batch + self._pending, []
                for _, future in failed:
                    if not future.done():
                        future.set_exception(error)
            else:
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
            finally:
                self._busy -= size
