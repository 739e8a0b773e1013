"""Snapshots of a model with a feature budget, through a real Redis: the file is the model at
one commit, its rows stored but evicted included, which the footer's marks say are gone; an
import holds only the features held, rebuilds the budget the learner loads (its counts and
marks the exported model's), and learns on exactly as the exported model and the in-process
learner do, also from an export taken while the worker learns and evicts."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry
from redis.exceptions import ResponseError

from online_ctr.config.settings import Settings
from online_ctr.learning.eviction import (
    CUT_ALL,
    CUT_ZERO,
    LOWEST,
    STABLE,
    WEIGHTED,
    ZERO,
    Evicting,
    held,
)
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule
from online_ctr.learning.snapshot import Footer, Header, RowChunk
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.learning.snapshot_writer import Writer
from online_ctr.metrics import Metrics
from online_ctr.store.snapshot_export import open_export
from online_ctr.store.snapshot_import import SnapshotImport
from online_ctr.store.state import ModelSpec, ModelStore
from online_ctr.wiring import model_spec
from testkit.paths import CRITEO
from tests.service.keys import AUTH
from tests.workers.conftest import MakeStore, scan_state, send
from tests.workers.test_budget_matches_replay import MOST
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.anyio

#: The rows learned before the export (those of test_budget_matches_replay), then after it.
ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 4_500))
FIRST = 3_000

Rows = dict[int, np.ndarray]


def settings_of(redis_url: str, rule: str, most: int = MOST) -> Settings:
    return Settings(
        redis_url=redis_url, state_buckets=64, state_shards=8, rule=rule, max_features=most,
        **AUTH,
    )  # fmt: skip


async def export(store: ModelStore) -> bytes:
    exporter = await open_export(store.redis, store.spec.name)
    return b"".join([piece async for piece in exporter.chunks()])


async def one_piece(blob: bytes) -> AsyncIterator[bytes]:
    yield blob


def file_rows(blob: bytes) -> tuple[Rows, Footer]:
    """The features a file says are stored (a later row replaces an earlier one, a row of
    ``tau`` 0 deletes), held or evicted, and its footer."""
    reader, rows = Reader(), dict[int, np.ndarray]()
    for item in reader.feed(blob):
        if isinstance(item, RowChunk):
            rows.update(zip(item.ids.tolist(), item.state, strict=True))
    stored = {feature: row for feature, row in rows.items() if row[-1] > 0}
    return stored, reader.close()


def held_rows(spec: ModelSpec, stored: Rows, marks: np.ndarray) -> Rows:
    """The rows of ``stored`` a budget of ``marks`` holds (their weight at ``tau`` judged)."""
    if not stored:
        return {}
    rows = np.array(list(stored.values()))
    zero = spec.rule.weights(spec.fields_of(rows), rows[:, -1], spec.params) == 0.0
    kept = held(rows[:, -1], zero, marks)
    return {feature: row for (feature, row), k in zip(stored.items(), kept, strict=True) if k}


def zero_weights_evicted(spec: ModelSpec, stored: Rows, footer: Footer) -> int:
    """How many of ``stored`` are evicted by the cutoff of zero weights alone: last touched
    after the cutoff of all features, and not held."""
    held = held_rows(spec, stored, footer.marks())
    return sum(row[-1] > footer.cut_all and f not in held for f, row in stored.items())


def in_process(settings: Settings, examples: int) -> InMemoryModel:
    """The in-process model of the same settings over the first ``examples`` of ROWS."""
    spec = model_spec(settings)
    model = InMemoryModel(
        spec.rule, spec.params, admission=spec.admission, max_features=spec.max_features
    )
    rows = ROWS[:examples]
    model.learn(FeatureHasher().batch([x for x, _ in rows], [y for _, y in rows]))
    return model


def assert_same_rows(left: Rows, right: Rows) -> None:
    """The same features, with the same rows bit for bit (a model's own rows end with their
    occurrence count, which a store does not keep: compare ``row[:-1]`` for those)."""
    assert left.keys() == right.keys()
    for feature, row in left.items():
        np.testing.assert_array_equal(row.view(np.uint64), right[feature].view(np.uint64))


def model_rows(model: InMemoryModel) -> Rows:
    """The in-process model's held rows as a store keeps them (without the count)."""
    return {feature: row[:-1] for feature, row in model.snapshot().items()}


async def budget_of(store: ModelStore) -> Evicting:
    budget = await store.feature_budget()
    assert budget is not None
    return budget


def assert_same_budget(left: Evicting, right: Evicting, rows: int = STABLE + 1) -> None:
    """The same marks, and counts in the first ``rows`` rows (the in-process learner keeps
    the first two only)."""
    np.testing.assert_array_equal(left.marks, right.marks)
    np.testing.assert_array_equal(left.counts[:rows], right.counts[:rows])


async def learn(store: ModelStore, rows: list[Any]) -> None:
    await send(store, rows, per_entry=50)
    config = WorkerConfig(name=f"w-{store.spec.name}", batch_size=512)
    await Worker(store, config, Metrics(CollectorRegistry())).run_until_idle()
    await store.redis.delete(store.keys.lease)  # the learner is gone


async def zset(store: ModelStore, key: str) -> dict[bytes, float]:
    return dict(await store.redis.zrange(key, 0, -1, withscores=True))


async def check_sets(store: ModelStore, rows: Rows) -> None:
    """The evictable set holds the expiring weights, each scored by its feature's last step."""
    expiring = await zset(store, store.keys.expiry)
    evictable = await zset(store, store.keys.evictable)
    assert evictable.keys() == expiring.keys()
    for member, score in evictable.items():
        assert score == rows[int.from_bytes(member, "little")][-1]


@pytest.mark.parametrize(("rule", "most"), [("ftrl", MOST), ("fobos", MOST), ("ftrl", 1_200)])
async def test_a_round_trip_is_the_model_and_learns_on_as_it_does(
    redis_url: str, rule: str, most: int
) -> None:
    settings = settings_of(redis_url, rule, most)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        original = ModelStore(redis, model_spec(settings))
        await original.ensure()
        await learn(original, ROWS[:FIRST])
        blob = await export(original)
        stored, footer = file_rows(blob)
        info, budget = await original.info(), await budget_of(original)
        spec = original.spec
        assert_same_rows(stored, await scan_state(original))
        source_held = held_rows(spec, stored, footer.marks())
        # The file has rows stored but evicted, which the footer's marks say are gone.
        assert len(source_held) < len(stored)
        np.testing.assert_array_equal(footer.marks(), budget.marks)
        assert (footer.features_tracked, footer.features_held, footer.nonzero_weights) == (
            info.features_tracked, info.features_held, info.nonzero_weights
        )  # fmt: skip
        assert (footer.features_tracked, footer.features_held) == (len(stored), len(source_held))
        assert footer.features_evicted == info.features_evicted
        assert footer.cut_zero >= footer.cut_all > 0
        if most == 1_200:  # zero weights evicted further than weights, some not swept yet
            assert footer.cut_zero > footer.cut_all
            assert zero_weights_evicted(spec, stored, footer) > 0

        # Another layout: the ids are kept, the layout says where they live.
        await SnapshotImport(redis, "copy", (256, 4)).run(one_piece(blob))
        copy = ModelStore(redis, replace(spec, name="copy", buckets=256, shards=4))
        copied, copied_rows = await copy.info(), await scan_state(copy)
        assert_same_rows(copied_rows, source_held)  # only the features held are imported
        assert (copied.t, copied.features_held, copied.nonzero_weights) == (
            info.t, info.features_held, info.nonzero_weights
        )  # fmt: skip
        assert copied.features_tracked == len(copied_rows) == info.features_held
        assert (copied.max_features, copied.features_evicted) == (most, info.features_evicted)
        assert_same_budget(await budget_of(copy), budget)
        assert await zset(copy, copy.keys.expiry) == await zset(original, original.keys.expiry)
        await check_sets(copy, copied_rows)
        if rule == "fobos":  # its weights reach zero untouched: some are in the expiry set
            assert await redis.zcard(copy.keys.expiry) > 0

        for store in (original, copy):
            await learn(store, ROWS[FIRST:])
        infos = [await original.info(), await copy.info()]
        budgets = [await budget_of(original), await budget_of(copy)]
        helds = [
            held_rows(spec, await scan_state(store), b.marks)
            for store, b in zip((original, copy), budgets, strict=True)
        ]
    finally:
        await redis.aclose()
    model = in_process(settings, len(ROWS))
    assert_same_rows(helds[0], helds[1])
    assert_same_rows(helds[1], model_rows(model))
    assert_same_budget(budgets[1], budgets[0])
    assert_same_budget(budgets[1], model.budget, rows=STABLE)
    # The rows stored but evicted differ (each model's learner sweeps its own layout).
    counts = [(i.t, i.features_held, i.nonzero_weights, i.features_evicted, i.logloss_sum)
              for i in infos]  # fmt: skip
    assert counts[0] == counts[1]
    assert counts[1][:4] == (
        len(ROWS), model.features_tracked(), model.nonzero_weights(), model.features_evicted()
    )  # fmt: skip


async def test_an_export_while_the_worker_learns_and_evicts_is_one_steps_model(
    redis_url: str,
) -> None:
    # A budget that evicts zero weights further than weights: the two cutoffs differ.
    settings = settings_of(redis_url, "fobos", most=5_000)
    redis = aioredis.Redis.from_url(redis_url)
    blobs: list[bytes] = []
    try:
        store = ModelStore(redis, model_spec(settings))
        await store.ensure()
        await send(store, ROWS[:FIRST], per_entry=1)
        config = WorkerConfig(name="w1", batch_size=7)  # many small commits, some mid-export
        worker = Worker(store, config, Metrics(CollectorRegistry()))
        running = asyncio.create_task(worker.run())
        try:
            while not blobs or file_rows(blobs[-1])[1].t < FIRST:
                blobs.append(await export(store))
        finally:
            worker.stop()
            await asyncio.wait_for(running, 10)
        exports = [file_rows(blob) for blob in blobs]
        spanning = [
            i
            for i, (_, footer) in enumerate(exports)
            if footer.source["seq"] > footer.source["pinned_seq"]
            and footer.cut_zero > footer.cut_all > 0
        ]
        assert spanning, "no export of an evicting model spanned a commit"
        # Imported, a file taken mid-learning is its step's model: its budget included, and
        # without the rows stored but evicted. Preferably one taken before the learner's
        # sweep deleted the zero weights last evicted (most runs have some; whether one does
        # is timing, so the round trip at 5,000 covers them for sure).
        unswept = [i for i in spanning if zero_weights_evicted(store.spec, *exports[i])]
        candidates = unswept or spanning
        chosen = candidates[len(candidates) // 2]
        await SnapshotImport(redis, "copy", (128, 2)).run(one_piece(blobs[chosen]))
        copy = ModelStore(redis, replace(store.spec, name="copy", buckets=128, shards=2))
        copied_rows, copied_budget = await scan_state(copy), await budget_of(copy)
        await check_sets(copy, copied_rows)
    finally:
        await redis.aclose()
    spec = store.spec
    for i in [*spanning[:: max(1, len(spanning) // 6)], chosen]:
        stored, footer = exports[i]
        model = in_process(settings, footer.t)
        assert_same_rows(held_rows(spec, stored, footer.marks()), model_rows(model))
        np.testing.assert_array_equal(footer.marks(), model.budget.marks)
        assert footer.features_tracked == len(stored)
        assert footer.features_held == model.features_tracked()
        assert footer.features_evicted == model.features_evicted()
        assert footer.nonzero_weights == model.nonzero_weights()
        if i == chosen:
            assert_same_rows(copied_rows, model_rows(model))
            assert_same_budget(copied_budget, model.budget, rows=STABLE)


async def test_an_import_counts_a_row_older_than_the_window_in_the_oldest_bin(
    make_store: MakeStore,
) -> None:
    """Far into a stream (step 64 * 20,000: bins 3,616 to 19,999 kept, 16,384 of them), a row
    of bin 0 counts in the oldest bin kept, one of the last bin in its slot (19,999 % 16,384),
    and a zero weight at or below the cutoff of zero weights is not imported."""
    store = await make_store()  # for its Redis; the import is of another name
    rule = get_rule("ftrl")
    params = rule.params(l1=1.0)
    t, lowest = 64 * 20_000, 3_616
    # ftrl's weight is zero while |z| <= l1: the first row carries one, the others do not.
    state = np.array([[-9.0, 4.0, 1.0], [0.5, 1.0, float(t)], [0.5, 1.0, 100.0]])
    header = Header("ftrl", vars(params), None, rule.fields, max_features=1_000)
    footer = Footer(t=t, logloss_sum=1.0, nonzero_weights=1, features_tracked=3,
                    features_held=2, features_evicted=7, cut_zero=192_000,
                    budget_lowest=lowest)  # fmt: skip
    writer = Writer()
    blob = writer.start(header) + writer.rows(np.array([3, 5, 9], np.uint64), state)
    blob += writer.finish(footer)
    await SnapshotImport(store.redis, "far", (64, 8)).run(one_piece(blob))
    spec = replace(store.spec, name="far", params=params, max_features=1_000)
    far = ModelStore(store.redis, spec)
    budget = await budget_of(far)
    expected = np.zeros_like(budget.counts)
    expected[WEIGHTED, lowest] = expected[STABLE, lowest] = 1  # ftrl's weights never expire
    expected[ZERO, 19_999 % 16_384] = 1
    np.testing.assert_array_equal(budget.counts, expected)
    assert (budget.marks[LOWEST], budget.tracked(), budget.evicted()) == (lowest, 2, 7)
    assert (budget.marks[CUT_ZERO], budget.marks[CUT_ALL]) == (192_000, 0)
    assert sorted(await scan_state(far)) == [3, 5]
    info = await far.info()
    assert (info.features_tracked, info.features_held, info.nonzero_weights) == (2, 2, 1)
    assert info.features_evicted == 7


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        (["t", "10", "cut_all", "-1"], "meta field cut_all is out of range"),
        (["t", "10", "evicted", "1.5"], "meta field evicted is not a whole number"),
        (["t", "10", "budget_lowest", "x"], "meta field budget_lowest"),
        (["t", "10", "cut_zero", "4", "cut_all", "8"], "cut_all is past cut_zero"),
        (["t", "10", "cut_zero", "11"], "cut_zero is past t"),
    ],
)
async def test_finishing_an_import_refuses_budget_marks_no_commit_could_take(
    make_store: MakeStore, fields: list[str], named: str
) -> None:
    store = await make_store()
    await store.redis.hset(store.keys.meta, "importing", "tok")
    before = await store.redis.hgetall(store.keys.meta)
    with pytest.raises(ResponseError, match=named):
        await store.scripts.finish(keys=[store.keys.meta], args=["tok", *fields])
    assert await store.redis.hgetall(store.keys.meta) == before
