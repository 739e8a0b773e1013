"""Feature admission in the real worker: the model in Redis equals the in-process learner with
the same rule, bit for bit, at batch sizes 1, 512 and 8,192, for Poisson and Bloom admission;
a learner that takes over mid-stream loads the counters its predecessor committed and loses
no count; the features not admitted have no state in Redis."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.admission import COUNTERS, Admission
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.snapshot import AdmissionCounters, Reader
from online_ctr.metrics import Metrics
from online_ctr.store.commits import WHOLE_FILTER_ABOVE
from online_ctr.store.snapshot_export import open_export
from online_ctr.store.snapshot_import import SnapshotImport
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from tests.conftest import CRITEO
from tests.service.keys import AUTH
from tests.workers.conftest import scan_state, send
from workers.consumer import Worker, WorkerConfig

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 3_000))


def reference(settings: Settings) -> InMemoryModel:
    spec = model_spec(settings)
    model = InMemoryModel(spec.rule, spec.params, encoding=spec.encoding, admission=spec.admission)
    hasher = FeatureHasher(numeric=settings.numeric)
    model.learn(hasher.batch([x for x, _ in ROWS], [y for _, y in ROWS]))
    return model


def settings_of(redis_url: str, admission: str, **extra: Any) -> Settings:
    return Settings(
        redis_url=redis_url,
        state_buckets=64,
        state_shards=8,
        admission=admission,
        **extra,
        **AUTH,
    )


def assert_model_is(stored: dict[int, np.ndarray], expected: dict[int, np.ndarray]) -> None:
    """The same features, with the same state rows bit for bit (the table's count aside)."""
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])


def distinct_features(settings: Settings) -> int:
    """How many features the rows hold, bias included."""
    ids = FeatureHasher(numeric=settings.numeric).batch([x for x, _ in ROWS]).ids
    return len(np.unique(ids))


async def learn(store: ModelStore, batch_size: int, registry: CollectorRegistry) -> None:
    config = WorkerConfig(name="w1", batch_size=batch_size)
    await Worker(store, config, Metrics(registry)).run_until_idle()


@pytest.mark.parametrize("admission", ["poisson:0.2", "bloom:2", "bloom:2:250"])
@pytest.mark.parametrize("batch_size", [1, 512, 8192])
async def test_the_worker_admits_as_the_in_process_learner(
    redis_url: str, admission: str, batch_size: int
) -> None:
    settings = settings_of(redis_url, admission)
    redis = aioredis.Redis.from_url(redis_url)
    registry = CollectorRegistry()
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        await send(store, ROWS, per_entry=50)
        await learn(store, batch_size, registry)
        stored, info = await scan_state(store), await store.info()
        counters = await redis.get(store.keys.admission) or b""
    finally:
        await redis.aclose()
    model = reference(settings)
    expected = model.snapshot()
    assert_model_is(stored, expected)
    assert info.features_tracked == len(expected) < distinct_features(settings)  # some wait
    assert info.t == len(ROWS)
    sample = registry.get_sample_value
    assert sample("online_ctr_features_admitted_total", {"model": "default"}) == len(expected)
    assert (
        sample("online_ctr_admission_dropped_gradients_total", {"model": "default"})
        == (model.dropped)
        > 0
    )
    fill = sample("online_ctr_admission_filter_fill_ratio", {"model": "default"})
    if admission.startswith("bloom"):  # the counters in use, as committed
        committed = np.frombuffer(counters, np.uint8)
        used = np.count_nonzero(committed)
        assert fill == used / COUNTERS and used > 0
        # Every count is the in-process learner's, halved where bloom:N:D halves them (a
        # string BITFIELD wrote ends at its last counter written: the rest are 0).
        whole = np.zeros(COUNTERS, np.uint8)
        whole[: len(committed)] = committed
        np.testing.assert_array_equal(whole, model.counters)
        if batch_size == 8192 and admission == "bloom:2":  # one group, which changed so
            assert used > WHOLE_FILTER_ABOVE  # many counters that it wrote the whole filter
    else:
        assert fill is None and counters == b""


@pytest.mark.parametrize("admission", ["bloom:3", "bloom:3:700"])
async def test_a_learner_that_takes_over_loses_no_count(redis_url: str, admission: str) -> None:
    """Half the stream learned by one worker, the rest by a new one (a takeover: nothing of
    the first is shared but Redis): the model is the in-process learner's of the whole."""
    settings = settings_of(redis_url, admission)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        half = len(ROWS) // 2
        await send(store, ROWS[:half], per_entry=50)
        await learn(store, 512, CollectorRegistry())
        assert (await redis.strlen(store.keys.admission)) > 0
        await redis.delete(store.keys.lease)  # the first learner is gone
        await send(store, ROWS[half:], per_entry=50)
        await learn(store, 512, CollectorRegistry())
        stored = await scan_state(store)
    finally:
        await redis.aclose()
    assert_model_is(stored, reference(settings).snapshot())


def test_the_rule_is_part_of_the_spec() -> None:
    spec = model_spec(Settings(admission="bloom:2"))
    assert spec.admission == Admission("bloom", n=2)
    assert spec.describe()["admission"] == "bloom:2"


@pytest.mark.parametrize("admission", ["bloom:3", "bloom:3:700"])
async def test_a_snapshot_keeps_the_rule_and_every_count(redis_url: str, admission: str) -> None:
    """Half the stream learned, the model exported and imported under another name, the rest
    learned by the copy: the copy is the in-process learner's model of the whole stream, so
    the file carried the admission rule and every count of the counting Bloom filter (and its
    step, from which the halvings of bloom:N:D follow)."""
    settings = settings_of(redis_url, admission)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        original = ModelStore(redis, model_spec(settings))
        await original.ensure()
        half = len(ROWS) // 2
        await send(original, ROWS[:half], per_entry=50)
        await learn(original, 512, CollectorRegistry())
        exporter = await open_export(redis, original.spec.name)
        blob = b"".join([piece async for piece in exporter.chunks()])
        items = Reader().feed(blob)
        assert any(isinstance(item, AdmissionCounters) for item in items)
        await SnapshotImport(redis, "copy", (64, 8)).run(one_piece(blob))
        copy = ModelStore(redis, replace(original.spec, name="copy"))
        assert (await copy.info()).admission == admission
        stored = await redis.get(copy.keys.admission)
        assert stored == await redis.get(original.keys.admission) and stored
        await send(copy, ROWS[half:], per_entry=50)
        await learn(copy, 512, CollectorRegistry())
        state = await scan_state(copy)
    finally:
        await redis.aclose()
    assert_model_is(state, reference(settings).snapshot())


async def one_piece(blob: bytes) -> AsyncIterator[bytes]:
    yield blob


async def test_compact_state_admits_as_the_compact_in_process_learner(redis_url: str) -> None:
    """Admission with the compact encoding: the rounding and the admission both part of the
    learning, Redis holds exactly what the in-process learner learned."""
    settings = settings_of(redis_url, "bloom:2", state_encoding="compact")
    redis = aioredis.Redis.from_url(redis_url)
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        await send(store, ROWS, per_entry=50)
        await learn(store, 512, CollectorRegistry())
        stored = await scan_state(store)
    finally:
        await redis.aclose()
    expected = reference(settings).snapshot()
    assert_model_is(stored, expected)
    assert len(expected) < distinct_features(settings)
