"""Change notices spare a warm pass its call, and never an exact answer: every commit is seen
by the next pass, a lost connection or a refusal means a call per pass again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
import pytest
import redis
import redis.asyncio as aioredis

from online_ctr.store.acl import ROLES, user_rules
from online_ctr.store.change_notices import ChangeNotices, opener
from online_ctr.store.replica import StateReplica
from online_ctr.store.state import ModelStore
from testkit.tls import Certificates, TlsRedisServer
from tests.workers.conftest import MakeStore
from tests.workers.test_replica import commit_unapplied, model_of, truth
from tests.workers.test_store_lookup import random_state, script_calls

pytestmark = pytest.mark.anyio

MakeNotices = Callable[..., ChangeNotices]


@pytest.fixture
async def make_notices(redis_url: str) -> AsyncIterator[MakeNotices]:
    """Notices on the test Redis (or another ``url``); all closed after the test."""
    made: list[ChangeNotices] = []

    def make(url: str = redis_url, **options: Any) -> ChangeNotices:
        made.append(ChangeNotices(opener(url, 2.0, options)))
        return made[-1]

    yield make
    for notices in made:
        await notices.close()


def replica_with(store: ModelStore, notices: ChangeNotices) -> StateReplica:
    return StateReplica(store.keys, store.spec.layout, store.scripts, 1_000_000, None, notices)


async def serve_calls(store: ModelStore) -> int:
    return (await script_calls(store)).get("cmdstat_evalsha", 0)


async def warm(replica: StateReplica, ids: np.ndarray) -> None:
    """Passes until the notices' connection is open and a call was made on it."""
    for _ in range(200):
        await replica.read(ids)
        if replica._quiet_since is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the notices' connection never opened")


async def test_a_warm_pass_makes_no_call_until_a_commit_and_then_sees_it(
    make_store: MakeStore, make_notices: MakeNotices
) -> None:
    store, ids, state = await model_of(make_store, 500, seed=3, applied=True)
    replica = replica_with(store, make_notices())
    await warm(replica, ids)
    expected = await truth(store, ids)
    calls = await serve_calls(store)
    for _ in range(5):
        fresh = await replica.read(ids)
        assert fresh is not None
        np.testing.assert_array_equal(fresh.state, expected)
    assert await serve_calls(store) == calls  # answered from the copy alone
    # Commits, each read at once after it (no wait): every one is in the next answer.
    rng = np.random.default_rng(4)
    for _ in range(20):
        changed = rng.choice(len(ids), 50, replace=False)
        state[changed] = rng.normal(size=(50, state.shape[1]))
        seq = await commit_unapplied(store, ids[changed], state[changed])
        fresh = await replica.read(ids)
        assert fresh is not None and replica.seq == seq
        np.testing.assert_array_equal(fresh.state, state)
    assert await serve_calls(store) == calls + 20


async def test_step_and_base_rate_come_from_the_call_the_copy_is_exact_as_of(
    make_store: MakeStore, make_notices: MakeNotices
) -> None:
    store, ids, _ = await model_of(make_store, 50, seed=5, applied=True)
    replica = replica_with(store, make_notices())
    await warm(replica, ids)
    await store.redis.hset(store.keys.meta, mapping={"t": 77, "base_clicks": 3})
    first = await replica.read(ids)
    again = await replica.read(ids)
    assert first is not None and again is not None
    assert (first.t, first.base[0]) == (again.t, again.base[0]) == (77, 3.0)


async def test_a_lost_connection_means_a_call_per_pass_until_it_is_open_again(
    make_store: MakeStore, make_notices: MakeNotices, redis_url: str
) -> None:
    store, ids, state = await model_of(make_store, 200, seed=6, applied=True)
    replica = replica_with(store, make_notices())
    await warm(replica, ids)
    admin = redis.Redis.from_url(redis_url)
    tracking = [c["id"] for c in admin.client_list() if "t" in c["flags"]]
    assert len(tracking) == 1
    admin.client_kill_filter(_id=tracking[0])
    admin.close()
    # A commit while no connection tracks the model: the next passes call, and see it.
    seq = await commit_unapplied(store, ids[:10], state[:10] + 1)
    state[:10] += 1
    calls = await serve_calls(store)
    fresh = await replica.read(ids)
    assert fresh is not None and replica.seq == seq
    np.testing.assert_array_equal(fresh.state, state)
    assert await serve_calls(store) == calls + 1
    await warm(replica, ids)  # opened again
    calls = await serve_calls(store)
    await replica.read(ids)
    assert await serve_calls(store) == calls


async def test_two_models_each_quiet_while_the_other_commits(
    make_store: MakeStore, make_notices: MakeNotices
) -> None:
    notices = make_notices()
    one, ids, _ = await model_of(make_store, 100, seed=7, applied=True)
    other = await make_store("ftrl", buckets=1 << 8, shards=4, name="other")
    other_ids, other_state = random_state(other, 100, seed=8)
    await other.shards.apply(1, other.spec.layout.records(other_ids, other_state))
    first, second = replica_with(one, notices), replica_with(other, notices)
    await warm(first, ids)
    await warm(second, other_ids)  # the second model's prefix: opened again with both
    await warm(first, ids)
    calls = await serve_calls(one)
    await commit_unapplied(other, other_ids[:5], other_state[:5] + 2)
    await first.read(ids)  # nothing of its own changed
    assert await serve_calls(one) == calls
    other_state[:5] += 2
    fresh = await second.read(other_ids)
    assert fresh is not None
    np.testing.assert_array_equal(fresh.state, other_state)
    assert await serve_calls(one) == calls + 1


async def test_a_user_that_may_not_track_reads_every_pass_with_one_warning(
    make_store: MakeStore,
    make_notices: MakeNotices,
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, ids, state = await model_of(make_store, 100, seed=9, applied=True)
    admin = redis.Redis.from_url(redis_url)
    rules = [r for r in user_rules(ROLES["api"], "pw") if r != "+client|tracking"]
    admin.acl_setuser("old-api", reset=True, enabled=True)
    admin.execute_command("ACL", "SETUSER", "old-api", *rules)
    admin.close()
    limited = redis_url.replace("redis://", "redis://old-api:pw@")
    replica = replica_with(store, make_notices(limited))
    with caplog.at_level(logging.WARNING):
        for _ in range(30):
            fresh = await replica.read(ids)
            assert fresh is not None
            np.testing.assert_array_equal(fresh.state, state)
            await asyncio.sleep(0.01)
    assert replica._quiet_since is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "+client|tracking" in warnings[0], warnings


async def test_notices_over_tls(
    make_store: MakeStore,
    make_notices: MakeNotices,
    make_tls_redis: Callable[..., TlsRedisServer],
    tls_certificates: Certificates,
) -> None:
    server = make_tls_redis()
    options = {k: v for k, v in tls_certificates.client_options().items() if k != "ssl"}
    notices = make_notices(server.url, **options)
    plain, ids, state = await model_of(make_store, 100, seed=10, applied=True)
    # The same model on the TLS Redis: its store's client speaks TLS too.
    client = aioredis.Redis.from_url(server.url, **options)
    store = ModelStore(client, plain.spec)
    try:
        await store.ensure()
        await store.shards.apply(1, store.spec.layout.records(ids, state))
        replica = replica_with(store, notices)
        await warm(replica, ids)
        calls = await serve_calls(store)
        await replica.read(ids)
        assert await serve_calls(store) == calls
        seq = await commit_unapplied(store, ids[:3], state[:3] * 2)
        state[:3] *= 2
        fresh = await replica.read(ids)
        assert fresh is not None and replica.seq == seq
        np.testing.assert_array_equal(fresh.state, state)
    finally:
        await client.aclose()


async def test_a_whole_copy_answers_features_no_pass_read_with_no_call(
    make_store: MakeStore, make_notices: MakeNotices
) -> None:
    """Read whole, the copy knows a feature it lacks is absent: while Redis tells of no
    change, rows no pass sent before cost no call either; a commit is still in the next."""
    store, ids, state = await model_of(make_store, 600, seed=9, applied=True)
    layout = store.spec.layout
    replica = StateReplica(
        store.keys, layout, store.scripts, 1_000_000, None, make_notices(), store.redis
    )
    await warm(replica, ids[:1])
    if replica.reading is not None:
        await replica.reading
    await warm(replica, ids[:1])  # the copy, read whole, makes its call
    assert replica.whole
    calls = await serve_calls(store)
    asked = np.concatenate([ids[1:], np.arange(1, 51, dtype=np.uint64)])
    expected = np.vstack([state[1:], np.zeros((50, layout.width))])
    fresh = await replica.read(asked)
    assert fresh is not None and await serve_calls(store) == calls
    np.testing.assert_array_equal(fresh.state, expected)
    new_ids, new_state = random_state(store, 40, seed=10)
    await commit_unapplied(store, new_ids, new_state)
    fresh = await replica.read(new_ids)
    assert fresh is not None and await serve_calls(store) == calls + 1
    np.testing.assert_array_equal(fresh.state, new_state)
