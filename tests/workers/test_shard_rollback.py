"""A state shard that went back (its master failed over to a replica that lacked an apply, with
the redo log already trimmed past it) is reported by the next learner, once: one log line,
``online_ctr_shard_rollbacks_total`` and ``shard_rollback`` in the meta (issue 37). A shard
behind while the redo log still holds its commits is the ordinary crash, repaired silently."""

from __future__ import annotations

import itertools
import logging

import pytest
from prometheus_client import CollectorRegistry

from online_ctr.learning.readers import read_examples
from online_ctr.metrics import Metrics
from online_ctr.store.shards import parse_stamp
from online_ctr.store.state import ModelStore
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, send
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 200))


async def learned(make_store: MakeStore) -> ModelStore:
    """A model that learned ROWS, its lease free for the next learner, its last commit still
    in the redo log, as on Redis Cluster (where shards fail over apart from the log side)."""
    store = await make_store()
    await send(store, ROWS, per_entry=50)
    first = Worker(store, WorkerConfig(name="w0", batch_size=50), Metrics(CollectorRegistry()))
    first.committer.trims_when_idle = False  # the single Redis of the test trims when idle
    await first.run_until_idle()
    await first.lease.release()
    return store


async def take_over(store: ModelStore, name: str) -> tuple[Metrics, Worker]:
    metrics = Metrics(CollectorRegistry())
    worker = Worker(store, WorkerConfig(name=name), metrics)
    await worker.run_until_idle()
    await worker.lease.release()
    return metrics, worker


async def a_shard_back(store: ModelStore) -> tuple[int, int]:
    """One shard's stamp set back by one commit, as a failover to a replica lacking its last
    apply leaves it; its number and the commit it lacks."""
    touched = await store.redis.hgetall(store.keys.touched)
    field, seq = max(touched.items(), key=lambda item: int(item[1]))
    shard = int(field[1:])
    applied = store.keys.shard(shard).applied
    assert parse_stamp(await store.redis.get(applied))[0] == int(seq)
    await store.redis.set(applied, str(int(seq) - 1))
    return shard, int(seq)


def rollbacks(metrics: Metrics) -> float:
    value = metrics.registry.get_sample_value(
        "online_ctr_shard_rollbacks_total", {"model": "default"}
    )
    return value or 0.0


async def test_a_shard_gone_back_past_the_redo_log_is_reported_once(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = await learned(make_store)
    shard, lacking = await a_shard_back(store)
    await store.redis.xtrim(store.keys.redo, maxlen=0)  # trimmed: nothing can bring it back

    with caplog.at_level(logging.ERROR, "workers.rollback"):
        metrics, _ = await take_over(store, "w1")
    assert rollbacks(metrics) == 1
    report = (await store.redis.hget(store.keys.meta, "shard_rollback")).decode()
    assert f"shards {shard} lack commits up to {lacking}" in report, report
    assert report in caplog.text
    applied = await store.redis.get(store.keys.shard(shard).applied)
    assert parse_stamp(applied)[0] == lacking  # stamped where the log says: said once

    again, _ = await take_over(store, "w2")
    assert rollbacks(again) == 0


async def test_a_shard_behind_with_its_commit_in_the_redo_log_is_repaired_silently(
    make_store: MakeStore,
) -> None:
    store = await learned(make_store)
    pending = await store.log.pending()
    assert pending, "the last commit's redo entry is trimmed only by the next commit"
    shard, lacking = await a_shard_back(store)
    assert lacking == pending[-1][0]

    metrics, _ = await take_over(store, "w1")
    assert rollbacks(metrics) == 0
    assert await store.redis.hget(store.keys.meta, "shard_rollback") is None
    assert parse_stamp(await store.redis.get(store.keys.shard(shard).applied))[0] == lacking


async def test_a_shard_lacking_a_trimmed_commit_is_reported_though_a_later_one_is_pending(
    make_store: MakeStore,
) -> None:
    store = await learned(make_store)
    [last] = await store.log.pending()
    # A shard the pending commit writes to, whose commit before that one is trimmed.
    shard, before = next((s, p) for s, p in sorted(last.prior.items()) if p > 0)
    await store.redis.set(store.keys.shard(shard).applied, str(before - 1))  # lacks it

    metrics, _ = await take_over(store, "w1")
    assert rollbacks(metrics) == 1
    report = (await store.redis.hget(store.keys.meta, "shard_rollback")).decode()
    assert f"shards {shard} lack commits up to {before}" in report, report
    # The replay, after it, brought the shard to the pending commit.
    assert parse_stamp(await store.redis.get(store.keys.shard(shard).applied))[0] == last.seq
