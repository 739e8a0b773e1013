"""Commits that finalize while an apply is in flight go out together, each feature once with
its latest state, and the model is still exactly the replay's; an apply that fails with
commits waiting loses none of them, nor does one that fails when nothing more comes."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from redis.exceptions import ConnectionError

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.store.commits import Commit, StateChange
from online_ctr.store.layout import NEW
from online_ctr.store.shards import Runs
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send
from tests.workers.test_existence_filter import expected_bitmaps
from workers.committer import MOST_WAITING
from workers.feedback import Group
from workers.learner_loop import Worker

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 1_200))
#: Commits finalized while the first apply is held.
HELD = 4


class Held:
    """The store's real finalize and apply, recorded, with the first apply held until
    :data:`HELD` more commits have finalized; then it goes on, or with ``fail`` raises."""

    def __init__(self, store: ModelStore, fail: bool = False) -> None:
        self.store, self.fail = store, fail
        self.finalized: dict[int, Runs] = {}
        self.applied: list[tuple[int, Runs]] = []
        self.go = asyncio.Event()
        finalize: Callable[..., Awaitable[Commit]] = store.log.finalize
        apply: Callable[..., Awaitable[None]] = store.shards.apply

        async def finalizing(change: StateChange, *args: Any) -> Commit:
            commit = await finalize(change, *args)
            self.finalized[commit.seq] = change.runs
            if len(self.finalized) > HELD:
                self.go.set()
            return commit

        async def applying(seq: int, runs: Runs, *generation: int) -> None:
            if not self.applied and not self.go.is_set():
                await self.go.wait()
                if self.fail:
                    self.fail = False
                    raise ConnectionError("Redis went away in the test")
            self.applied.append((seq, runs))
            await apply(seq, runs, *generation)

        store.log.finalize = finalizing  # type: ignore[method-assign]
        store.shards.apply = applying  # type: ignore[method-assign]


def table(store: ModelStore, runs: Runs) -> np.ndarray:
    """The write records of ``runs``, a row of bytes each (u32 bucket, field, value)."""
    layout = store.spec.layout
    size = 4 + layout.field_bytes + layout.value_bytes
    return np.frombuffer(b"".join(blob for _, blob in runs), np.uint8).reshape(-1, size)


def records(store: ModelStore, runs: Runs) -> int:
    return len(table(store, runs))


def features(store: ModelStore, runs: Runs) -> set[bytes]:
    """The features ``runs`` write: each record's bucket (without :data:`NEW`) and field."""
    keys = table(store, runs)[:, : 4 + store.spec.layout.field_bytes].copy()
    keys[:, 3] &= 0x7F  # NEW is the top bit of the little-endian bucket number
    return {row.tobytes() for row in keys}


async def assert_equals_replay(store: ModelStore, rows: int) -> None:
    """The stored model is the in-process replay of the first ``rows`` rows, and every stored
    feature has its bit in its shard's existence filter."""
    info = await store.info()
    stored = await scan_state(store)
    model = InMemoryModel(store.spec.rule, store.spec.params)
    replay(ROWS[:rows], model, FeatureHasher(), batch_size=1)
    expected = model.snapshot()
    assert info.t == rows and stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    assert info.nonzero_weights == recount_nonzero(store, stored, info.t)
    assert info.features_tracked == len(stored)
    layout = store.spec.layout
    ids = np.array(list(stored), np.uint64)
    for shard, bitmap in enumerate(expected_bitmaps(layout, ids)):
        assert await store.redis.get(store.keys.shard(shard).filter) == bitmap.tobytes()


async def test_commits_waiting_for_an_apply_go_out_together_each_feature_once(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=4096, shards=16)
    await send(store, ROWS)
    held = Held(store)
    await make_worker(store, batch_size=100).run_until_idle()

    first, (seq, runs), *_ = held.applied
    assert first[0] == 1
    # Commits 2 to 5 at least waited for the first apply, and went out in one.
    together = range(2, seq + 1)
    assert HELD <= len(together) <= MOST_WAITING
    assert [s for s, _ in held.applied] == sorted({s for s, _ in held.applied})
    # Each feature once: as many writes as the commits touched distinct features, fewer than
    # one by one (Criteo's rows share most of theirs).
    one_by_one = sum(records(store, held.finalized[s]) for s in together)
    distinct = set().union(*(features(store, held.finalized[s]) for s in together))
    assert records(store, runs) == len(distinct) < one_by_one
    await assert_equals_replay(store, len(ROWS))


class Recorded:
    """The store's real apply, each call's commit number and records recorded."""

    def __init__(self, store: ModelStore) -> None:
        self.applied: list[tuple[int, Runs]] = []
        apply: Callable[..., Awaitable[None]] = store.shards.apply

        async def applying(seq: int, runs: Runs, *generation: int) -> None:
            self.applied.append((seq, runs))
            await apply(seq, runs, *generation)

        store.shards.apply = applying  # type: ignore[method-assign]


async def test_an_apply_lingers_for_later_commits_and_the_learner_does_not_wait(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=4096, shards=16)
    await send(store, ROWS)
    recorded = Recorded(store)
    # A linger no run of 12 commits outlasts: only MOST_WAITING commits waiting, or the
    # learner's settle at the end, sends an apply out.
    worker = make_worker(store, batch_size=100, apply_linger_ms=60_000)
    assert await worker.run_until_idle() == len(ROWS) // 100
    seqs = [seq for seq, _ in recorded.applied]
    assert seqs == sorted(seqs) and seqs[-1] == len(ROWS) // 100
    # The first apply waited for later commits: fewer applies than commits, each feature of
    # the commits that went out together written once.
    assert len(seqs) < len(ROWS) // 100
    assert all(records(store, runs) == len(features(store, runs)) for _, runs in recorded.applied)
    await assert_equals_replay(store, len(ROWS))


async def test_an_apply_that_fails_with_commits_waiting_loses_none_of_them(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=4096, shards=16)
    await send(store, ROWS)
    held = Held(store, fail=True)
    worker = make_worker(store, batch_size=100, error_backoff_s=0.01)
    running = asyncio.create_task(worker.run())
    while (await store.info()).t < len(ROWS) or not held.applied:
        await asyncio.sleep(0.01)
    worker.stop()
    await running
    # The failed apply's commit and those that waited were finalized: the learner that
    # recovered replayed them from the redo log, and learned no example twice.
    assert held.applied[0][0] == 1 and len(held.finalized) == len(ROWS) // 100
    await assert_equals_replay(store, len(ROWS))


async def test_an_idle_learner_whose_last_apply_failed_applies_it_without_more_feedback(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=4096, shards=16)
    await send(store, ROWS[:200], per_entry=200)  # one entry: one group, one commit
    apply = store.shards.apply
    failed: list[tuple[int, Runs]] = []

    async def failing_once(seq: int, runs: Runs, *generation: int) -> None:
        if not failed:
            failed.append((seq, runs))
            raise ConnectionError("Redis went away in the test")
        await apply(seq, runs, *generation)

    store.shards.apply = failing_once  # type: ignore[method-assign]
    worker = make_worker(store, batch_size=200, error_backoff_s=0.01, batch_wait_ms=20)
    running = asyncio.create_task(worker.run())

    async def shards_applied() -> bool:
        if not failed:
            return False
        seq, runs = failed[0]
        done = await store.redis.mget([store.keys.shard(shard).applied for shard, _ in runs])
        return all(int(d or 0) >= seq for d in done)

    try:
        # One commit, whose apply fails; the stream stays empty after it. Before the idle
        # learner checked its apply, the shards stayed behind until the next commit.
        async with asyncio.timeout(10):
            while not await shards_applied():
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await running
    await assert_equals_replay(store, 200)


def drained_only_after_the_applies(worker: Worker, last: int) -> None:
    """The worker finds the stream drained only once commit ``last`` is applied: that apply
    ends before the learner is idle, so it has no reason to trim the redo log itself."""
    next_group = worker.stream.next_group

    async def drained_late(*args: Any) -> Group:
        group = await next_group(*args)
        if not group.entry_ids and not group.undecodable:
            # applied_through moves, then the apply decides whether to trim, with no await
            # between: once it is seen here, that decision has been taken.
            while worker.committer.applied_through < last:
                await asyncio.sleep(0.005)
        return group

    worker.stream.next_group = drained_late  # type: ignore[method-assign]


async def trimmed(store: ModelStore) -> tuple[int, int, int]:
    """The model's last commit, the commit the redo log is trimmed through, its length."""
    seq, through = await store.redis.hmget(store.keys.meta, "seq", "trimmed")
    return int(seq), int(through or 0), await store.redis.xlen(store.keys.redo)


async def test_an_idle_learner_trims_the_log_through_an_apply_that_ended_before(
    make_store: MakeStore,
) -> None:
    """Once idle, the learner trims the redo log through its last commit (so a serving copy
    reads no shard's progress, test_replica), also where that commit's apply ended before the
    learner found the stream drained: under load that order happened, and the log kept it."""
    store = await make_store("ftrl", buckets=1 << 10, shards=16)
    await send(store, ROWS[:400], per_entry=100)
    worker = make_worker(store, batch_size=100)
    drained_only_after_the_applies(worker, 4)
    assert await worker.run_until_idle() == 4
    assert await trimmed(store) == (4, 4, 0)
    # And a running learner, idle after more feedback, the same.
    await send(store, ROWS[400:600], per_entry=100)
    drained_only_after_the_applies(worker, 6)
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(10):
            while await trimmed(store) != (6, 6, 0):
                await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await running


def marked(store: ModelStore, runs: Runs) -> int:
    """Records of ``runs`` whose bucket number carries :data:`NEW` (their bit is to be set)."""
    buckets = table(store, runs)[:, :4].copy().view("<u4")[:, 0]
    return int((buckets >= NEW).sum())


async def test_a_new_feature_whose_bit_an_earlier_commit_set_is_not_marked_again(
    make_store: MakeStore,
) -> None:
    # One shard of 16 buckets: a filter of 2,944 bits, which Criteo's features soon fill.
    store = await make_store("ftrl", buckets=16, shards=1)
    changes: list[StateChange] = []
    finalize: Callable[..., Awaitable[Commit]] = store.log.finalize

    async def finalizing(change: StateChange, *args: Any) -> Commit:
        changes.append(change)
        return await finalize(change, *args)

    store.log.finalize = finalizing  # type: ignore[method-assign]
    half = len(ROWS) // 2
    await send(store, ROWS[:half])
    first = make_worker(store, "first", batch_size=100)
    await first.run_until_idle()
    await first.lease.release()
    await send(store, ROWS[half:])
    await make_worker(store, "second", batch_size=100).run_until_idle()
    created = sum(change.tracked_delta for change in changes)
    assert 0 < sum(marked(store, change.runs) for change in changes) < created / 2
    # Yet every stored feature has its bit (a successor loaded the first's from Redis), and
    # the model is the replay's.
    await assert_equals_replay(store, len(ROWS))
