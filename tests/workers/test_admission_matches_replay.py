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
from online_ctr.learning.snapshot import NONE_ADMITTED, AdmissionCounters, Header, RowChunk
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.learning.snapshot_writer import Writer
from online_ctr.metrics import Metrics
from online_ctr.store.commits import WHOLE_FILTER_ABOVE
from online_ctr.store.snapshot_export import open_export
from online_ctr.store.snapshot_import import SnapshotImport
from online_ctr.store.state import TALLY_FIELDS, ModelStore
from online_ctr.wiring import model_spec
from testkit.paths import CRITEO
from tests.service.keys import AUTH
from tests.workers.conftest import scan_state, send
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 3_000))
PENDING = "online_ctr_features_pending_admission"


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
        tally = await redis.hmget(store.keys.meta, *TALLY_FIELDS)
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
        assert tally == [str(used).encode(), " ".join(map(str, model.recent)).encode()]
        expected_pending = model.features_pending()
        assert expected_pending is not None and expected_pending > 0
        assert info.features_pending_admission == expected_pending
        assert sample(PENDING, {"model": "default"}) == expected_pending
    else:
        assert fill is None and counters == b"" and tally == [None, None]
        assert info.features_pending_admission is None
        assert sample(PENDING, {"model": "default"}) is None


@pytest.mark.parametrize("admission", ["bloom:3", "bloom:3:700"])
async def test_a_learner_that_takes_over_loses_no_count(redis_url: str, admission: str) -> None:
    """Half the stream learned by one worker, the rest by a new one (a takeover: nothing of
    the first is shared but Redis): the model is the in-process learner's of the whole."""
    settings = settings_of(redis_url, admission)
    redis = aioredis.Redis.from_url(redis_url)
    registry = CollectorRegistry()
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        half = len(ROWS) // 2
        await send(store, ROWS[:half], per_entry=50)
        await learn(store, 512, CollectorRegistry())
        assert (await redis.strlen(store.keys.admission)) > 0
        await redis.delete(store.keys.lease)  # the first learner is gone
        await send(store, ROWS[half:], per_entry=50)
        await learn(store, 512, registry)
        stored, info = await scan_state(store), await store.info()
    finally:
        await redis.aclose()
    model = reference(settings)
    assert_model_is(stored, model.snapshot())
    # The admissions per period too: the new learner's estimate is the whole stream's.
    assert info.features_pending_admission == model.features_pending()
    assert registry.get_sample_value(PENDING, {"model": "default"}) == model.features_pending()


def test_the_rule_is_part_of_the_spec() -> None:
    spec = model_spec(Settings(admission="bloom:2"))
    assert spec.admission == Admission("bloom", n=2)
    assert spec.describe()["admission"] == "bloom:2"


@pytest.mark.parametrize("admission", ["bloom:3", "bloom:3:700"])
async def test_a_snapshot_keeps_the_rule_and_every_count(redis_url: str, admission: str) -> None:
    """Half the stream learned, the model exported and imported under another name, the rest
    learned by the copy: the copy is the in-process learner's model of the whole stream, so
    the file carried the admission rule and every count of the counting Bloom filter (and its
    step, from which the halvings of bloom:N:D follow); and its admissions per halving period,
    so the copy's estimate of the features pending admission is the whole stream's too."""
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
        info = await copy.info()
        assert info.admission == admission
        stored = await redis.get(copy.keys.admission)
        assert stored == await redis.get(original.keys.admission) and stored
        # The filter's tally too: the copy estimates the features pending as the original.
        tally = await redis.hmget(copy.keys.meta, *TALLY_FIELDS)
        assert tally == await redis.hmget(original.keys.meta, *TALLY_FIELDS)
        assert tally[0] == str(len(stored) - stored.count(0)).encode()
        assert any(int(count) for count in tally[1].split())
        pending = (await original.info()).features_pending_admission
        assert info.features_pending_admission == pending and pending is not None
        await send(copy, ROWS[half:], per_entry=50)
        await learn(copy, 512, CollectorRegistry())
        state, info = await scan_state(copy), await copy.info()
    finally:
        await redis.aclose()
    model = reference(settings)
    assert_model_is(state, model.snapshot())
    assert info.features_pending_admission == model.features_pending()


async def test_a_file_without_the_admissions_per_period_imports_none_admitted(
    redis_url: str,
) -> None:
    """A file written before the footer carried the filter's admissions per period: the copy
    has its counters and their tally, and none admitted, so its estimate of the features
    pending errs high (it takes the admitted features the filter remembers as pending)."""
    settings = settings_of(redis_url, "bloom:3")
    redis = aioredis.Redis.from_url(redis_url)
    try:
        original = ModelStore(redis, model_spec(settings))
        await original.ensure()
        await send(original, ROWS[:1500], per_entry=50)
        await learn(original, 512, CollectorRegistry())
        exporter = await open_export(redis, original.spec.name)
        blob = b"".join([piece async for piece in exporter.chunks()])
        writer, older = Writer(), b""
        for item in Reader().feed(blob):  # the same file, as a writer of before wrote it
            if isinstance(item, Header):
                older += writer.start(item)
            elif isinstance(item, RowChunk):
                older += writer.rows(item.ids, item.state)
            elif isinstance(item, AdmissionCounters):
                older += writer.counters(item.counters)
            else:
                assert item.admitted_recent != NONE_ADMITTED
                older += writer.finish(replace(item, admitted_recent=NONE_ADMITTED))
        assert b"admitted_recent" in blob and b"admitted_recent" not in older
        await SnapshotImport(redis, "copy", (64, 8)).run(one_piece(older))
        copy = ModelStore(redis, replace(original.spec, name="copy"))
        used, recent = await redis.hmget(copy.keys.meta, *TALLY_FIELDS)
        assert used == (await redis.hget(original.keys.meta, TALLY_FIELDS[0]))
        assert recent == b"0 0 0 0 0 0 0 0"
        pending = (await copy.info()).features_pending_admission
        exact = (await original.info()).features_pending_admission
    finally:
        await redis.aclose()
    assert pending is not None and exact is not None and pending > exact


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
