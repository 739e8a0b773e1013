"""Idempotency-Key records are bounded per feedback tag (OCTR_MAX_IDEMPOTENCY_KEYS): past the
limit the oldest are dropped first, records that expired leave the index, and append.lua and
join.lua keep record and index in step. On the real Redis of the tests."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from online_ctr.config.join_policy import JoinPolicy
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.store import idempotency
from online_ctr.store.idempotency import KeyLimits
from online_ctr.store.impressions import Impressions
from online_ctr.store.ingest import FeedbackLog
from online_ctr.store.keys import FeedbackKeys
from online_ctr.store.redis_types import text
from online_ctr.store.state import ModelStore
from tests.workers.conftest import MakeStore

pytestmark = pytest.mark.anyio


def batch(i: int) -> Batch:
    return FeatureHasher().batch([{"site": f"s{i}"}], [i % 2])


def feedback_log(store: ModelStore, most: int, window_s: int = 600) -> FeedbackLog:
    keys = store.keys
    return FeedbackLog(store.redis, keys.feedback, [keys], KeyLimits(window_s, most))


async def records(store: ModelStore) -> set[str]:
    """The Idempotency-Key records the model's tag holds, by key."""
    prefix = store.keys.feedback.idempotency("")
    found = [k async for k in store.redis.scan_iter(match=prefix + "*", count=1000)]
    return {text(k)[len(prefix) :] for k in found}


async def indexed(store: ModelStore) -> set[str]:
    members = await store.redis.zrange(store.keys.feedback.idempotency_index, 0, -1)
    return {text(m) for m in cast(list[bytes], members)}


async def test_the_records_never_exceed_the_limit_and_match_the_index(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    log = feedback_log(store, most=50)
    evicted = 0
    for i in range(400):
        appended = await log.append(batch(i), f"req-{i:04d}")
        assert not appended.replayed
        evicted += appended.evicted
        if i % 37 == 0 or i >= 395:
            held = await records(store)
            assert len(held) == min(i + 1, 50)
            assert held == await indexed(store)  # record and index never disagree
    assert evicted == 350
    assert await records(store) == {f"req-{i:04d}" for i in range(350, 400)}
    assert await idempotency.held(store.redis, store.keys.feedback) == 50
    assert await store.redis.xlen(store.keys.stream) == 400


async def test_the_oldest_are_dropped_first_and_their_retry_is_appended_again(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    log = feedback_log(store, most=3)
    # Names in reverse order of their writing: the order dropped is by age, not by name.
    for i, key in enumerate(["e", "d", "c", "b", "a"]):
        assert (await log.append(batch(i), key)).evicted == (1 if i >= 3 else 0)
    assert await records(store) == {"c", "b", "a"}
    kept = await log.append(batch(4), "a")  # a kept key: a replay, nothing appended
    assert kept.replayed and kept.evicted == 0
    assert await store.redis.xlen(store.keys.stream) == 5
    # A dropped key's retry is a new request (the documented cost of the limit): appended
    # again, and it drops the oldest kept record in turn.
    again = await log.append(batch(0), "e")
    assert (again.replayed, again.evicted) == (False, 1)
    assert await store.redis.xlen(store.keys.stream) == 6
    assert await records(store) == {"b", "a", "e"} == await indexed(store)


async def test_records_that_expired_leave_the_index(make_store: MakeStore) -> None:
    store = await make_store()
    log = feedback_log(store, most=100, window_s=1)
    for i in range(5):
        await log.append(batch(i), f"old-{i}")
    assert len(await indexed(store)) == 5
    for _ in range(100):  # Redis expires them after the window (1 s): wait for that, no more
        if not await records(store):
            break
        await asyncio.sleep(0.05)
    assert await records(store) == set()
    appended = await log.append(batch(9), "new")
    assert appended.evicted == 0  # expired records are pruned, not counted as dropped
    assert await indexed(store) == {"new"} == await records(store)


async def test_joins_keep_the_same_bound_in_the_same_index(make_store: MakeStore) -> None:
    store = await make_store()
    keys = store.keys
    log = feedback_log(store, most=4)
    impressions = Impressions(store.redis, keys.feedback, [keys.stream], JoinPolicy(60))
    limits = KeyLimits(600, 4)
    for i in range(3):
        await log.append(batch(i), f"learn-{i}")
    dropped = []
    for i in range(4):  # ids never served: answered unknown, the key recorded all the same
        joined = await impressions.join([f"p-{i}"], [1], f"join-{i}", limits)
        assert joined.codes == "1" and not joined.replayed
        dropped.append(joined.evicted)
    assert dropped == [0, 1, 1, 1]
    assert await records(store) == {"join-0", "join-1", "join-2", "join-3"}
    again = await impressions.join(["p-3"], [1], "join-3", limits)
    assert again.replayed and again.evicted == 0
    assert await records(store) == await indexed(store)


async def test_a_full_tag_after_a_lower_limit_is_worked_down_in_bounded_steps(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    big = feedback_log(store, most=2500)
    for i in range(2500):
        await big.append(batch(i), f"k-{i}")
    small = feedback_log(store, most=10)  # a restart with a lower OCTR_MAX_IDEMPOTENCY_KEYS
    steps = [(await small.append(batch(i), f"n-{i}")).evicted for i in range(4)]
    # At most 1000 per call, so Redis is never busy long: 2500 -> 1501 -> 502 -> 10 -> 10.
    assert steps == [1000, 1000, 493, 1]
    assert len(await records(store)) == 10 == len(await indexed(store))


async def test_deleting_a_model_deletes_its_records_and_their_index(
    make_store: MakeStore,
) -> None:
    store = await make_store()
    log = feedback_log(store, most=10)
    for i in range(15):
        await log.append(batch(i), f"k-{i}")
    deleted = await store.delete()
    assert deleted >= 10  # the ten records held, with the model's own keys
    assert await records(store) == set()
    assert not await store.redis.exists(FeedbackKeys.of("default", None).idempotency_index)
