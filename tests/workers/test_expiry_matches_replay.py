"""Feature expiry in the real worker: the model in Redis equals the in-process learner with the
same ``expire_after``, bit for bit, at batch sizes 1, 512 and 8,192 (and with admission);
expired features are deleted from Redis by the learner's sweep, and its counts add up exactly:
features stored = the meta's ``tracked``, and those expired plus those stored past their end
= the in-process count. A learner that takes over mid-stream changes nothing."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.admission import Admission
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.retention import live
from online_ctr.metrics import Metrics
from online_ctr.store.layout import DELETE
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from testkit.paths import CRITEO
from tests.service.keys import AUTH
from tests.workers.conftest import scan_state, send
from tests.workers.test_grouped_applies import Held
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 3_000))
#: Short enough that most features expire, many more than once.
SPAN = 200


def settings_of(redis_url: str, **extra: Any) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, expire_after=SPAN, **extra, **AUTH
    )


def reference(settings: Settings) -> tuple[InMemoryModel, float]:
    """The in-process model of the same settings over ROWS, and its log-loss sum."""
    spec = model_spec(settings)
    model = InMemoryModel(
        spec.rule, spec.params, admission=spec.admission, expire_after=spec.expire_after
    )
    hasher = FeatureHasher(numeric=settings.numeric)
    learned = model.learn(hasher.batch([x for x, _ in ROWS], [y for _, y in ROWS]))
    return model, float(learned.losses.sum())


async def learn(store: ModelStore, batch_size: int, metrics: Metrics) -> None:
    config = WorkerConfig(name="w1", batch_size=batch_size)
    await Worker(store, config, metrics).run_until_idle()


async def run(settings: Settings, batch_size: int, halves: bool = False) -> dict[str, Any]:
    """Send ROWS, learn them (in two halves by two learners with ``halves``) and read back
    everything the test compares."""
    redis = aioredis.Redis.from_url(settings.redis_url)
    registry = CollectorRegistry()
    metrics = Metrics(registry)  # the learners' in turn: their counts add up
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        parts = [ROWS[: len(ROWS) // 2], ROWS[len(ROWS) // 2 :]] if halves else [ROWS]
        for part in parts:
            await send(store, part, per_entry=50)
            await learn(store, batch_size, metrics)
            await redis.delete(store.keys.lease)  # the learner is gone
        stored, info = await scan_state(store), await store.info()
        ids = np.array(list(stored), np.uint64)
        weights = await store.weights(ids)
    finally:
        await redis.aclose()
    return {"stored": stored, "info": info, "weights": dict(zip(stored, weights, strict=True)),
            "registry": registry}  # fmt: skip


def check(got: dict[str, Any], settings: Settings) -> InMemoryModel:
    """The model in Redis is the in-process one, and the counts add up."""
    model, logloss_sum = reference(settings)
    info, stored = got["info"], got["stored"]
    t = info.t
    held = {i: row for i, row in stored.items() if live(row[-1:], t, SPAN)[0]}
    expected = model.snapshot()
    assert held.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(held[feature], row[:-1])
    # Everything stored is counted; what expired was counted once, deleted or not yet.
    assert info.features_tracked == len(stored)
    past_end = len(stored) - len(held)
    assert info.features_expired + past_end == model.features_expired() > 1000
    assert info.nonzero_weights == model.nonzero_weights() > 0
    assert info.logloss_sum == pytest.approx(logloss_sum, rel=1e-12)
    # Serving reads a feature past its end as gone, a held one as the model's weight.
    for feature in stored:
        if feature not in held:
            assert got["weights"][feature] == 0.0
    sample = got["registry"].get_sample_value
    assert sample("online_ctr_features_expired_total", {"model": "default"}) == (
        info.features_expired
    )
    return model


@pytest.mark.parametrize("batch_size", [1, 512, 8192])
async def test_the_worker_expires_as_the_in_process_learner(
    redis_url: str, batch_size: int
) -> None:
    settings = settings_of(redis_url)
    got = await run(settings, batch_size)
    model = check(got, settings)
    if batch_size < len(ROWS):
        # The sweep deleted what expired: it passes over every bucket within half a span,
        # and sees a commit's rows once the shards have them, two commits later at most. So
        # every row still stored was touched within a span and a half and two commits.
        commit = max(50, batch_size // 50 * 50)  # examples per commit: entries of 50
        t = got["info"].t
        oldest = min(row[-1] for row in got["stored"].values())
        assert oldest > t - 1.5 * SPAN - 2 * commit
        assert len(got["stored"]) < model.features_tracked() + model.features_expired() // 2


@pytest.mark.parametrize("admission", ["bloom:2", "poisson:0.3"])
async def test_with_admission_too(redis_url: str, admission: str) -> None:
    settings = settings_of(redis_url, admission=admission)
    check(await run(settings, 512), settings)


async def test_a_learner_that_takes_over_changes_nothing(redis_url: str) -> None:
    settings = settings_of(redis_url, admission="poisson:0.3")
    check(await run(settings, 64, halves=True), settings)


def test_the_span_is_part_of_the_spec() -> None:
    spec = model_spec(Settings(expire_after=1000))
    assert spec.expire_after == 1000 and spec.describe()["expire_after"] == "1000"
    assert spec.width == len(spec.rule.fields) + 1
    assert model_spec(Settings()).describe()["expire_after"] == "0"
    assert Admission.parse("all") == model_spec(Settings(expire_after=5)).admission


async def test_commits_applied_together_delete_what_the_last_one_deleted(
    redis_url: str,
) -> None:
    """Commits that wait for a held apply go out in one apply, each feature with its latest
    state: a feature one of them deleted (expired, and not admitted again) is deleted there,
    not written as a row of zeros."""
    settings = settings_of(redis_url, admission="poisson:0.3")
    redis = aioredis.Redis.from_url(settings.redis_url)
    registry = CollectorRegistry()
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        await send(store, ROWS, per_entry=50)
        held = Held(store)
        config = WorkerConfig(name="w1", batch_size=100)
        await Worker(store, config, Metrics(registry)).run_until_idle()
        stored, info = await scan_state(store), await store.info()
        weights = await store.weights(np.array(list(stored), np.uint64))
    finally:
        await redis.aclose()
    _, (seq, together), *_ = held.applied
    deletes = np.frombuffer(b"".join(blob for _, blob in together), np.uint8)
    layout = store.spec.layout
    numbers = deletes.reshape(-1, 4 + layout.field_bytes + layout.value_bytes)[:, :4]
    flags = np.ascontiguousarray(numbers).view("<u4").ravel()
    assert seq > 2 and (flags & DELETE).any()  # the held group deleted features
    got = {"stored": stored, "info": info, "registry": registry,
           "weights": dict(zip(stored, weights, strict=True))}  # fmt: skip
    check(got, settings)
