"""Snapshots of a model that expires features, through a real Redis: the file is the model's
state at one commit, its deletions included (a row of ``tau`` 0), also while the worker learns
and deletes; an import is that model, and learns on exactly as the in-process learner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.retention import live
from online_ctr.learning.snapshot import Footer, RowChunk
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.metrics import Metrics
from online_ctr.store.snapshot_export import open_export
from online_ctr.store.snapshot_import import SnapshotImport, last_rows
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from tests.workers.conftest import scan_state, send
from tests.workers.test_expiry_matches_replay import ROWS, SPAN, settings_of
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.anyio

Rows = dict[int, np.ndarray]


async def export(store: ModelStore) -> bytes:
    exporter = await open_export(store.redis, store.spec.name)
    return b"".join([piece async for piece in exporter.chunks()])


async def one_piece(blob: bytes) -> AsyncIterator[bytes]:
    yield blob


def file_rows(blob: bytes) -> tuple[Rows, Footer, int]:
    """The features a file says are stored (a later row replaces an earlier one, a row of
    ``tau`` 0 deletes), its footer, and how many rows of ``tau`` 0 it has."""
    reader, rows, deletions = Reader(), {}, 0
    for item in reader.feed(blob):
        if isinstance(item, RowChunk):
            for feature, row in zip(item.ids.tolist(), item.state, strict=True):
                rows[feature] = row
                deletions += row[-1] == 0
    stored = {feature: row for feature, row in rows.items() if row[-1] > 0}
    return stored, reader.close(), deletions


def in_process(settings: Any, examples: int) -> InMemoryModel:
    """The in-process model of the same settings over the first ``examples`` of ROWS."""
    spec = model_spec(settings)
    model = InMemoryModel(
        spec.rule, spec.params, admission=spec.admission, expire_after=spec.expire_after
    )
    rows = ROWS[:examples]
    model.learn(FeatureHasher().batch([x for x, _ in rows], [y for _, y in rows]))
    return model


def assert_is_model(stored: Rows, t: int, model: InMemoryModel) -> None:
    """The features held (stored, not past their end) are the model's, bit for bit."""
    held = {feature: row for feature, row in stored.items() if live(row[-1:], t, SPAN)[0]}
    expected = model.snapshot()
    assert held.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(held[feature].view(np.uint64), row[:-1].view(np.uint64))


def assert_same_rows(left: Rows, right: Rows) -> None:
    assert left.keys() == right.keys()
    for feature, row in left.items():
        np.testing.assert_array_equal(row.view(np.uint64), right[feature].view(np.uint64))


async def learn(store: ModelStore, rows: list[Any], registry: CollectorRegistry) -> None:
    await send(store, rows, per_entry=50)
    config = WorkerConfig(name=f"w-{store.spec.name}", batch_size=512)
    await Worker(store, config, Metrics(registry)).run_until_idle()


async def test_a_round_trip_keeps_every_count_and_learning_goes_on_as_in_process(
    redis_url: str,
) -> None:
    settings = settings_of(redis_url, admission="bloom:2")
    redis = aioredis.Redis.from_url(redis_url)
    half = len(ROWS) // 2
    try:
        original = ModelStore(redis, model_spec(settings))
        await original.ensure()
        await learn(original, ROWS[:half], CollectorRegistry())
        blob = await export(original)
        stored, footer, _ = file_rows(blob)
        info = await original.info()
        assert_same_rows(stored, await scan_state(original))
        assert (footer.features_tracked, footer.nonzero_weights, footer.features_expired) == (
            info.features_tracked, info.nonzero_weights, info.features_expired
        )  # fmt: skip
        assert footer.features_expired > 500

        # Another layout: the ids are kept, the layout says where they live.
        await SnapshotImport(redis, "copy", (256, 4)).run(one_piece(blob))
        copy = ModelStore(redis, replace(original.spec, name="copy", buckets=256, shards=4))
        copied = await copy.info()
        assert copied.expire_after == SPAN and copied.admission == "bloom:2"
        assert (copied.t, copied.features_tracked, copied.nonzero_weights) == (
            info.t, info.features_tracked, info.nonzero_weights
        )  # fmt: skip
        assert copied.features_expired == info.features_expired
        assert await redis.zrange(copy.keys.expiry, 0, -1, withscores=True) == await redis.zrange(
            original.keys.expiry, 0, -1, withscores=True
        )
        assert_same_rows(await scan_state(copy), stored)

        await learn(copy, ROWS[half:], CollectorRegistry())
        stored, after = await scan_state(copy), await copy.info()
    finally:
        await redis.aclose()
    model = in_process(settings, len(ROWS))
    assert after.t == len(ROWS)
    assert_is_model(stored, after.t, model)
    past_end = sum(not live(row[-1:], after.t, SPAN)[0] for row in stored.values())
    assert after.features_tracked == len(stored)
    assert after.features_expired + past_end == model.features_expired()
    assert after.nonzero_weights == model.nonzero_weights()


async def test_an_export_while_the_worker_learns_and_deletes_is_one_steps_model(
    redis_url: str,
) -> None:
    settings = settings_of(redis_url, admission="poisson:0.3")
    redis = aioredis.Redis.from_url(redis_url)
    blobs: list[bytes] = []
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        await send(store, ROWS, per_entry=1)
        config = WorkerConfig(name="w1", batch_size=7)  # many small commits, some mid-export
        worker = Worker(store, config, Metrics(CollectorRegistry()))
        running = asyncio.create_task(worker.run())
        try:
            while not blobs or file_rows(blobs[-1])[1].t < len(ROWS):
                blobs.append(await export(store))
        finally:
            worker.stop()
            await asyncio.wait_for(running, 10)
        exports = [file_rows(blob) for blob in blobs]
        spanning = [e for e in exports if e[1].source["seq"] > e[1].source["pinned_seq"]]
        assert spanning, "no export spanned a commit: nothing was rolled forward"
        deleting = [i for i, (_, footer, deleted) in enumerate(exports)
                    if deleted and footer.source["seq"] > footer.source["pinned_seq"]]  # fmt: skip
        assert deleting, "no roll-forward deleted a feature"
        # Imported, a file's deletions delete: the rows stored are the file's, and its counts
        # (which the import checks against the rows it wrote) hold.
        await SnapshotImport(redis, "copy", (64, 8)).run(one_piece(blobs[deleting[0]]))
        copy = ModelStore(redis, replace(store.spec, name="copy"))
        assert_same_rows(await scan_state(copy), exports[deleting[0]][0])
    finally:
        await redis.aclose()
    for stored, footer, _ in spanning[:: max(1, len(spanning) // 6)]:
        model = in_process(settings, footer.t)
        assert_is_model(stored, footer.t, model)
        past_end = sum(not live(row[-1:], footer.t, SPAN)[0] for row in stored.values())
        assert footer.features_tracked == len(stored)
        assert footer.features_expired + past_end == model.features_expired()
        assert footer.nonzero_weights == model.nonzero_weights()


def test_an_import_takes_each_ids_last_row_of_a_chunk() -> None:
    """A file may repeat an id within a chunk: its last row is the one (a deletion included)."""
    ids = np.array([5, 7, 5, 9, 7], np.uint64)
    state = np.arange(15, dtype=np.float64).reshape(5, 3)
    got_ids, got_state = last_rows(RowChunk(ids, state))
    assert got_ids.tolist() == [5, 9, 7]
    np.testing.assert_array_equal(got_state, state[[2, 3, 4]])
    unique = RowChunk(np.array([3, 1], np.uint64), state[:2])
    assert last_rows(unique)[0] is unique.ids
