"""Replica acknowledgements on a real Redis Cluster (issue 37, item 1): with a replica stalled,
a write is not acknowledged and a commit not applied; a replica that is gone is not waited
for; and a learner that takes over applies the commit once its replica has it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio.cluster import RedisCluster

from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.rules import get_rule
from online_ctr.metrics import Metrics
from online_ctr.store.idempotency import KeyLimits
from online_ctr.store.ingest import FeedbackLog
from online_ctr.store.replication import ReplicaAckError, ReplicaAcks
from online_ctr.store.shards import parse_stamp
from online_ctr.store.state import ModelStore, spec_from
from testkit.local_cluster import LocalCluster
from tests.workers.conftest import make_worker

pytestmark = pytest.mark.anyio

T = TypeVar("T")

TIMEOUT_MS = 200
#: How long a replica may take to catch up before a call outside a freeze must pass: one the
#: session's earlier tests restarted can still be syncing on a busy machine.
CATCH_UP_S = 30.0
LIMITS = KeyLimits(window_s=3600, most=1000)
ROWS = [({"site": f"s{i % 7}", "ad": f"a{i % 5}"}, i % 2) for i in range(40)]


async def replica_of(cluster: RedisCluster, key: str) -> int:
    """Port of the replica of the master serving ``key``."""
    node = cluster.get_node_from_key(key)
    assert node is not None
    role = await cluster.execute_command("ROLE", target_nodes=node)
    assert len(role[2]) == 1, role
    return int(role[2][0][1])


async def acknowledged(call: Callable[[], Awaitable[T]]) -> T:
    """``call`` (idempotent) again while its replica wait times out, for at most CATCH_UP_S."""
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        try:
            return await call()
        except ReplicaAckError:
            assert time.monotonic() < deadline, "the replica never caught up"
            await asyncio.sleep(0.1)


@contextlib.contextmanager
def frozen(redis_cluster: LocalCluster, port: int) -> Iterator[None]:
    """The node on ``port`` stopped (SIGSTOP) for the block: its master keeps it attached,
    and it acknowledges nothing. Short, so that the cluster does not fail it."""
    redis_cluster.kill(port, signal.SIGSTOP)
    try:
        yield
    finally:
        redis_cluster.kill(port, signal.SIGCONT)


def store_on(cluster: RedisCluster, acks: ReplicaAcks | None = None) -> ModelStore:
    spec = spec_from("m", "ftrl", get_rule("ftrl").params(), None, 64, 8, "float64")
    return ModelStore(cluster, spec, acks=acks)


def batch_of(store: ModelStore) -> Batch:
    hasher = FeatureHasher(store.spec.hash_bits, numeric=store.spec.numeric)
    return hasher.batch([x for x, _ in ROWS], [y for _, y in ROWS])


async def test_an_append_is_acknowledged_only_once_the_replica_has_it(
    redis_cluster: LocalCluster, redis_cluster_url: str, cluster: RedisCluster
) -> None:
    metrics = Metrics(CollectorRegistry())
    acks = ReplicaAcks(cluster, 1, TIMEOUT_MS, metrics.replica_ack_timeouts)
    store = store_on(cluster)
    await store.ensure()
    log = FeedbackLog(cluster, store.keys.feedback, [store.keys], LIMITS, acks)
    batch = batch_of(store)
    assert (await acknowledged(lambda: log.append(batch, "k1"))).accepted == len(ROWS)
    timeouts = metrics.replica_ack_timeouts.labels("learn")

    before = timeouts._value.get()
    with frozen(redis_cluster, await replica_of(cluster, store.keys.stream)):
        with pytest.raises(ReplicaAckError, match="0 of 1 replicas"):
            await log.append(batch, "k2")
        # On the master, not confirmed: the retry with the same key must be too.
        with pytest.raises(ReplicaAckError):
            await log.append(batch, "k2")
    assert timeouts._value.get() - before == 2
    retried = await acknowledged(lambda: log.append(batch, "k2"))
    assert retried.replayed and retried.accepted == len(ROWS)
    assert await cluster.xlen(store.keys.stream) == 2  # appended once


async def test_a_replica_that_is_gone_is_not_waited_for(
    redis_cluster: LocalCluster,
    redis_cluster_url: str,
    cluster: RedisCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = store_on(cluster)
    await store.ensure()
    acks = ReplicaAcks(cluster, 1, TIMEOUT_MS)
    log = FeedbackLog(cluster, store.keys.feedback, [store.keys], LIMITS, acks)
    replica = await replica_of(cluster, store.keys.stream)
    redis_cluster.kill(replica)  # and left down: its master cannot fail over to anything
    node = cluster.get_node_from_key(store.keys.stream)
    for _ in range(50):  # the master notices at once (the socket closes); allow a moment
        if not (await cluster.execute_command("ROLE", target_nodes=node))[2]:
            break
        await asyncio.sleep(0.05)
    with caplog.at_level(logging.WARNING, "online_ctr.store.replication"):
        await log.append(batch_of(store), "k1")  # one wait: ROLE then says it is gone
        await log.append(batch_of(store), "k2")
    assert await cluster.xlen(store.keys.stream) == 2
    assert "has 0 of the 1 replicas" in caplog.text


async def test_a_commit_is_applied_only_once_the_log_replica_has_it(
    redis_cluster: LocalCluster, redis_cluster_url: str, cluster: RedisCluster
) -> None:
    store = store_on(cluster, ReplicaAcks(cluster, 1, TIMEOUT_MS))
    await store.ensure()
    learner = make_worker(store)
    assert await acknowledged(learner.run_until_idle) == 0  # leads, recovered, nothing yet
    await FeedbackLog(cluster, store.keys.feedback, [store.keys], LIMITS).append(batch_of(store))
    with frozen(redis_cluster, await replica_of(cluster, store.keys.meta)):
        with pytest.raises(ReplicaAckError):  # from the apply's wait, when it settles
            await learner.run_until_idle()
        # Finalized on the master and kept in its redo log, but applied to no shard.
        [(seq, runs, _)] = await store.log.pending()
        applied = [store.keys.shard(shard).applied for shard, _ in runs]
        assert [parse_stamp(await cluster.get(key)) for key in applied] == [(0, 0)] * len(runs)
        assert int(await cluster.hget(store.keys.meta, "t")) == len(ROWS)

    # The next learner confirms the log side, replays the redo log, confirms the shards'
    # replicas and only then trims it.
    await learner.lease.release()
    assert await acknowledged(make_worker(store, "w2").run_until_idle) == 0
    assert await store.log.pending() == []
    assert [parse_stamp(await cluster.get(key)) for key in applied] == [(seq, 0)] * len(runs)
