"""The worker, through Redis, builds exactly the state the in-process replay builds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import redis.asyncio as aioredis

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.store.calibration_codec import (
    FIT_FIELD,
    HISTOGRAM_FIELD,
    decode_fit,
    encode_histogram,
)
from online_ctr.store.state import ModelStore, spec_from
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, recount_nonzero, scan_state, send

pytestmark = pytest.mark.anyio


async def check_matches_replay(
    make_store: MakeStore,
    rule: str,
    rows: int,
    batch_size: int,
    per_entry: int = 1,
    encoding: str = "float64",
    apply_linger_ms: int = 0,
) -> None:
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), rows))
    store = await make_store(rule, encoding=encoding)
    await send(store, examples, per_entry=per_entry)
    worker = make_worker(store, batch_size=batch_size, apply_linger_ms=apply_linger_ms)
    await worker.run_until_idle()

    # The replay learns one example at a time whatever its batch size: 1 is the definition.
    model = InMemoryModel(store.spec.rule, store.spec.params, encoding=encoding)
    result = replay(examples, model, FeatureHasher(), batch_size=1)
    info = await store.info()
    stored = await scan_state(store)
    expected = model.snapshot()

    assert info.t == model.t == rows
    assert stored.keys() == expected.keys()
    # Same float operations in the same order on both sides: bit-for-bit equal.
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    # The sum is accumulated by Redis (HINCRBYFLOAT, long double, printed to 17 digits) in
    # another order than numpy's; over 10^4 terms that leaves ~1e-14 relative.
    assert info.logloss_sum == pytest.approx(result.logloss * rows, rel=1e-12)
    assert info.nonzero_weights == model.nonzero_weights() == recount_nonzero(store, stored, info.t)
    assert info.features_tracked == model.features_tracked()
    assert info.stream_lag == 0


@pytest.mark.parametrize("batch_size", [1, 512, 8192])
async def test_ftrl_worker_equals_replay_on_the_whole_criteo_file(
    make_store: MakeStore, batch_size: int
) -> None:
    # Batch size sets how much is read and committed at once, never the math.
    await check_matches_replay(make_store, "ftrl", rows=10_000, batch_size=batch_size)


async def test_ftrl_worker_whose_applies_linger_equals_replay(make_store: MakeStore) -> None:
    # Each apply waits for later commits (until MOST_WAITING of them wait), the learner goes
    # on meanwhile: the features it reads are still exactly what one-by-one applies leave.
    await check_matches_replay(
        make_store, "ftrl", rows=10_000, batch_size=512, apply_linger_ms=60_000
    )


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_every_rule_worker_equals_replay(make_store: MakeStore, rule: str) -> None:
    await check_matches_replay(make_store, rule, rows=1_000, batch_size=1)


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_every_rule_worker_equals_replay_in_large_groups(
    make_store: MakeStore, rule: str
) -> None:
    # Entries of 7 examples, up to 500 examples learned per commit.
    await check_matches_replay(make_store, rule, rows=3_000, batch_size=500, per_entry=7)


@pytest.mark.parametrize("batch_size", [1, 512, 8192])
async def test_compact_ftrl_worker_equals_the_compact_replay_on_the_whole_criteo_file(
    make_store: MakeStore, batch_size: int
) -> None:
    # The rounding is part of the learning: Redis holds exactly what the replay learned.
    await check_matches_replay(
        make_store, "ftrl", rows=10_000, batch_size=batch_size, encoding="compact"
    )


async def test_compact_l1sgd_worker_equals_the_compact_replay_in_large_groups(
    make_store: MakeStore,
) -> None:
    await check_matches_replay(
        make_store, "l1sgd", rows=3_000, batch_size=500, per_entry=7, encoding="compact"
    )


@pytest.mark.parametrize(("batch_size", "per_entry"), [(1, 1), (500, 7)])
async def test_calibration_worker_equals_replay(
    redis_url: str, batch_size: int, per_entry: int
) -> None:
    # The learner refits at every commit (1 and ~500 examples here), the replay once per
    # batch of 1: the histogram, and so the fit, is the same floats whatever the grouping.
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))
    client = aioredis.Redis.from_url(redis_url)
    spec = spec_from(
        "default",
        "ftrl",
        get_rule("ftrl").params(),
        None,
        64,
        8,
        numeric="raw",
        calibration="power",
    )
    store = ModelStore(client, spec)
    await store.ensure()
    await send(store, examples, per_entry=per_entry)
    worker = make_worker(store, batch_size=batch_size)
    await worker.run_until_idle()

    model = InMemoryModel(spec.rule, spec.params, calibration="power")
    replay(examples, model, FeatureHasher(), batch_size=1)
    assert model.calibration is not None
    meta = await client.hgetall(store.keys.meta)
    assert meta[HISTOGRAM_FIELD.encode()] == encode_histogram(model.calibration.histogram)
    assert decode_fit(meta[FIT_FIELD.encode()]) == model.calibration.fit
    # A standby that takes over starts from the stored histogram.
    await client.delete(store.keys.lease)
    successor = make_worker(store, name="w2")
    await send(store, examples[:300])
    await successor.run_until_idle()
    replay(examples[:300], model, FeatureHasher(), batch_size=300)
    stored = await client.hget(store.keys.meta, HISTOGRAM_FIELD)
    assert stored == encode_histogram(model.calibration.histogram)
    await client.aclose()


@pytest.mark.parametrize("apply_linger_ms", [0, 60_000])
async def test_a_worker_whose_cache_is_trimmed_all_the_time_still_equals_replay(
    make_store: MakeStore, apply_linger_ms: int
) -> None:
    # 3,000 Criteo rows touch ~17,000 features: a cache bound of 2,000 is trimmed at almost
    # every commit, and the dropped features are read back from Redis exactly as stored.
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), 3_000))
    store = await make_store("ftrl")
    await send(store, examples, per_entry=10)
    worker = make_worker(
        store, batch_size=100, cache_features=2_000, apply_linger_ms=apply_linger_ms
    )
    await worker.run_until_idle()
    assert len(worker.cache) <= 2_000 + 100 * 40  # the bound, plus one group's features

    model = InMemoryModel(store.spec.rule, store.spec.params)
    replay(examples, model, FeatureHasher(), batch_size=1)
    stored, expected = await scan_state(store), model.snapshot()
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
