"""The coalescer behind /predict: shared passes, bounds, errors and cancellation (no Redis)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from service.api.coalesce import Coalescer


class Recorder:
    """A pass function that records its passes and waits on a gate before answering."""

    def __init__(self, fail: bool = False) -> None:
        self.passes: list[list[int]] = []
        self.running = 0
        self.most_running = 0
        self.gate = asyncio.Event()
        self.fail = fail

    async def __call__(self, items: list[int]) -> list[int]:
        self.passes.append(items)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        await self.gate.wait()
        self.running -= 1
        if self.fail:
            raise ConnectionError("redis is down")
        return [item * 10 for item in items]


T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def test_requests_waiting_meanwhile_share_the_next_pass() -> None:
    async def scenario() -> tuple[list[int], Recorder]:
        recorder = Recorder()
        coalescer = Coalescer(recorder, lambda item: 1, max_batch=100, in_flight=1)
        first = asyncio.ensure_future(coalescer.submit(1))
        await asyncio.sleep(0)  # the first pass starts with item 1 alone
        rest = [asyncio.ensure_future(coalescer.submit(i)) for i in range(2, 6)]
        await asyncio.sleep(0)
        recorder.gate.set()
        return list(await asyncio.gather(first, *rest)), recorder

    results, recorder = run(scenario())
    assert results == [10, 20, 30, 40, 50]
    assert recorder.passes == [[1], [2, 3, 4, 5]]


def test_passes_are_bounded_in_size_and_in_number() -> None:
    async def scenario() -> Recorder:
        recorder = Recorder()
        coalescer = Coalescer(recorder, lambda item: item, max_batch=5, in_flight=2)
        waiting = []
        for item in (1, 2, 3, 4, 5, 6):
            waiting.append(asyncio.ensure_future(coalescer.submit(item)))
            await asyncio.sleep(0)
        recorder.gate.set()
        assert await asyncio.gather(*waiting) == [10, 20, 30, 40, 50, 60]
        return recorder

    recorder = run(scenario())
    assert recorder.most_running == 2
    assert all(sum(items) <= 5 or len(items) == 1 for items in recorder.passes)
    assert sorted(item for items in recorder.passes for item in items) == [1, 2, 3, 4, 5, 6]


def test_no_second_pass_while_a_full_one_is_in_flight() -> None:
    """Full passes would only queue inside Redis: they go one at a time."""

    async def scenario() -> Recorder:
        recorder = Recorder()
        coalescer = Coalescer(recorder, lambda item: 5, max_batch=5, in_flight=4)
        waiting = []
        for item in range(4):
            waiting.append(asyncio.ensure_future(coalescer.submit(item)))
            await asyncio.sleep(0)
        recorder.gate.set()
        assert await asyncio.gather(*waiting) == [0, 10, 20, 30]
        return recorder

    recorder = run(scenario())
    assert recorder.most_running == 1
    assert recorder.passes == [[0], [1], [2], [3]]


def test_a_failed_pass_fails_each_of_its_requests() -> None:
    async def scenario() -> list[BaseException | int]:
        recorder = Recorder(fail=True)
        recorder.gate.set()
        coalescer = Coalescer(recorder, lambda item: 1, max_batch=10, in_flight=1)
        return await asyncio.gather(
            *(coalescer.submit(i) for i in range(3)), return_exceptions=True
        )

    results = run(scenario())
    assert [type(result) for result in results] == [ConnectionError] * 3


def test_a_cancelled_request_does_not_cancel_the_pass() -> None:
    async def scenario() -> int:
        recorder = Recorder()
        coalescer = Coalescer(recorder, lambda item: 1, max_batch=10, in_flight=1)
        leaving = asyncio.ensure_future(coalescer.submit(1))
        staying = asyncio.ensure_future(coalescer.submit(2))
        await asyncio.sleep(0)
        leaving.cancel()
        await asyncio.sleep(0)
        recorder.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await leaving
        return await staying

    assert run(scenario()) == 20


def test_a_failed_pass_also_fails_the_requests_queued_behind_it() -> None:
    """A hung Redis: requests queued behind a pass fail when it fails, not one timeout later."""

    async def scenario() -> tuple[list[BaseException | int], Recorder]:
        recorder = Recorder(fail=True)
        coalescer = Coalescer(recorder, lambda item: 1, max_batch=10, in_flight=1)
        first = asyncio.ensure_future(coalescer.submit(1))
        await asyncio.sleep(0)
        queued = [asyncio.ensure_future(coalescer.submit(i)) for i in (2, 3)]
        await asyncio.sleep(0)
        recorder.gate.set()
        results = await asyncio.gather(first, *queued, return_exceptions=True)
        return results, recorder

    results, recorder = run(scenario())
    assert [type(result) for result in results] == [ConnectionError] * 3
    assert recorder.passes == [[1]]


def test_a_lone_request_runs_its_pass_in_its_own_task() -> None:
    """Nothing in flight: no task and no future between a request and its pass."""

    async def scenario() -> tuple[bool, int]:
        submitter: list[asyncio.Task[Any] | None] = []

        async def where(items: list[int]) -> list[int]:
            submitter.append(asyncio.current_task())
            return items

        coalescer = Coalescer(where, lambda item: 1, max_batch=10, in_flight=4)
        result = await coalescer.submit(7)
        return submitter == [asyncio.current_task()], result

    assert run(scenario()) == (True, 7)


def test_a_cancelled_lone_request_lets_the_requests_behind_it_through() -> None:
    async def scenario() -> tuple[int, Recorder]:
        recorder = Recorder()
        coalescer = Coalescer(recorder, lambda item: 1, max_batch=10, in_flight=1)
        alone = asyncio.ensure_future(coalescer.submit(1))
        await asyncio.sleep(0)  # its pass is in flight: the next request waits for it
        behind = asyncio.ensure_future(coalescer.submit(2))
        await asyncio.sleep(0)
        alone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await alone
        recorder.gate.set()
        return await behind, recorder

    result, recorder = run(scenario())
    assert result == 20 and recorder.passes == [[1], [2]]


async def _instant(items: list[int]) -> list[int]:
    """A pass that asks Redis nothing: it ends without yielding to the event loop."""
    return [item * 10 for item in items]


def test_requests_among_others_share_a_pass_that_never_yields() -> None:
    """Submitted while the server holds other requests, a request's pass starts in a task
    of its own, after theirs, and takes the ones submitted by then."""

    async def scenario() -> tuple[list[int], list[list[int]]]:
        passes: list[list[int]] = []

        async def instant(items: list[int]) -> list[int]:
            passes.append(items)
            return await _instant(items)

        coalescer = Coalescer(instant, lambda item: 1, 100, 1, others=lambda: True)
        results = await asyncio.gather(*(coalescer.submit(item) for item in range(5)))
        return results, passes

    assert run(scenario()) == ([0, 10, 20, 30, 40], [[0, 1, 2, 3, 4]])


def test_alone_in_the_server_each_pass_that_never_yields_is_its_own() -> None:
    """Nothing else in progress (the default): no pass waits for requests to come."""

    async def scenario() -> tuple[list[int], list[list[int]]]:
        passes: list[list[int]] = []

        async def instant(items: list[int]) -> list[int]:
            passes.append(items)
            return await _instant(items)

        coalescer = Coalescer(instant, lambda item: 1, max_batch=100, in_flight=1)
        results = await asyncio.gather(*(coalescer.submit(item) for item in range(3)))
        return results, passes

    assert run(scenario()) == ([0, 10, 20], [[0], [1], [2]])


def test_a_large_request_runs_alone_among_others() -> None:
    """An item of ``alone_from`` or more runs its pass at once, others or not; the small
    ones submitted beside it still share theirs."""

    async def scenario() -> tuple[list[int], list[list[int]]]:
        passes: list[list[int]] = []

        async def instant(items: list[int]) -> list[int]:
            passes.append(items)
            return await _instant(items)

        coalescer = Coalescer(instant, lambda item: item, 100, 1, lambda: True, alone_from=50)
        results = await asyncio.gather(*(coalescer.submit(item) for item in (60, 1, 2)))
        return results, passes

    assert run(scenario()) == ([600, 10, 20], [[60], [1, 2]])
