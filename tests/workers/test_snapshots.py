"""Snapshots through a real Redis: export -> import is exact, the imported model learns on
exactly as the original, and an export taken while a worker learns is one step's state."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import Row, read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.snapshot import Footer, RowChunk, SnapshotError
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.store import snapshot_scan
from online_ctr.store.snapshot_export import ExportFailedError, ModelNotFoundError, open_export
from online_ctr.store.snapshot_import import ModelExistsError, SnapshotImport
from online_ctr.store.state import ModelImportingError, ModelStore, spec_from
from testkit.paths import CRITEO
from tests.workers.conftest import MakeStore, make_worker, scan_state, send
from workers.learner_loop import Worker

pytestmark = pytest.mark.anyio

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))


async def export(store: ModelStore, name: str | None = None) -> bytes:
    exporter = await open_export(store.redis, name or store.spec.name)
    return b"".join([piece async for piece in exporter.chunks()])


async def pieces(blob: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for first in range(0, len(blob), size):
        yield blob[first : first + size]


async def import_as(
    store: ModelStore, blob: bytes, name: str, layout: tuple[int, int], replace: bool = False
) -> ModelStore:
    await SnapshotImport(store.redis, name, layout, replace).run(pieces(blob))
    spec = store.spec
    new = spec_from(name, spec.rule.name, spec.params, spec.hash_bits, *layout)
    return ModelStore(store.redis, new)


def file_state(blob: bytes) -> tuple[dict[int, np.ndarray], Footer]:
    """A snapshot's final state by id (later rows replace earlier ones) and its footer."""
    reader = Reader()
    state: dict[int, np.ndarray] = {}
    for item in reader.feed(blob):
        if isinstance(item, RowChunk):
            state.update(zip(item.ids.tolist(), item.state, strict=True))
    return state, reader.close()


async def meta_view(store: ModelStore) -> tuple[object, ...]:
    """Everything a model's future depends on besides its state."""
    info = await store.info()
    raw_loss = await store.redis.hget(store.keys.meta, "logloss_sum")
    expiry = await store.redis.zrange(store.keys.expiry, 0, -1, withscores=True)
    return info.t, raw_loss, info.nonzero_weights, info.features_tracked, expiry


def assert_same_state(left: dict[int, np.ndarray], right: dict[int, np.ndarray]) -> None:
    """Same features, and bit for bit the same state rows."""
    assert left.keys() == right.keys()
    order = sorted(left)
    rows = np.array([left[f] for f in order]), np.array([right[f] for f in order])
    np.testing.assert_array_equal(rows[0].view(np.uint64), rows[1].view(np.uint64))


WORKERS: dict[int, Worker] = {}


async def learn(store: ModelStore, rows: list[Row]) -> None:
    """Learn ``rows`` with the store's one worker (a second would wait for the first's lease)."""
    await send(store, rows, per_entry=5)
    worker = WORKERS.setdefault(
        id(store), make_worker(store, f"w-{store.spec.name}", batch_size=97)
    )
    await worker.run_until_idle()


@pytest.mark.parametrize("rule", sorted(RULES))
async def test_round_trip_is_exact_and_learning_continues_bit_for_bit(
    make_store: MakeStore, rule: str
) -> None:
    half = len(ROWS) // 2
    original = await make_store(rule, buckets=64, shards=8)
    await learn(original, ROWS[:half])

    blob = await export(original)
    # Another layout: the ids are kept, the layout says where they live.
    copy = await import_as(original, blob, "copy", (256, 4))
    assert_same_state(await scan_state(original), await scan_state(copy))
    assert await meta_view(original) == await meta_view(copy)
    again, footer = file_state(await export(copy))
    assert_same_state(file_state(blob)[0], again)
    assert footer.t == half

    for store in (original, copy):
        await learn(store, ROWS[half:])
    # The copy's learner trusted every shard's existence filter (made by the import), so a
    # filter missing an imported feature would have made it learn that one from zero.
    known = WORKERS[id(copy)].mirror.known
    assert known is not None and known.trusted.all()
    assert_same_state(await scan_state(original), await scan_state(copy))
    assert await meta_view(original) == await meta_view(copy)
    assert (await copy.info()).t == len(ROWS)


async def test_a_name_in_use_is_refused_unless_replaced(make_store: MakeStore) -> None:
    first = await make_store("ftrl", name="first")
    await learn(first, ROWS[:300])
    second = await make_store("ftrl", name="second")
    await learn(second, ROWS[300:400])
    blob = await export(first)
    with pytest.raises(ModelExistsError, match="'second' exists"):
        await import_as(first, blob, "second", (64, 8))
    assert (await second.info()).t == 100  # untouched

    replaced = await import_as(first, blob, "second", (64, 8), replace=True)
    assert_same_state(await scan_state(first), await scan_state(replaced))
    assert (await replaced.info()).t == 300


async def test_a_bad_file_leaves_no_model_behind(make_store: MakeStore) -> None:
    store = await make_store("rda")
    await learn(store, ROWS[:300])
    blob = bytearray(await export(store))
    blob[len(blob) // 2] ^= 0xFF
    with pytest.raises(SnapshotError, match="corrupt"):
        await import_as(store, bytes(blob), "broken", (64, 8))
    assert not [key async for key in store.redis.scan_iter(match="octr:{broken*")]
    with pytest.raises(ModelNotFoundError):
        await open_export(store.redis, "broken")


async def test_a_model_being_imported_is_neither_served_nor_learned(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl")
    await learn(store, ROWS[:200])
    blob = await export(store)
    importing = SnapshotImport(store.redis, "late", (64, 8))
    cut = len(blob) // 2

    waiting = asyncio.Event()

    async def half_then_wait() -> AsyncIterator[bytes]:
        yield blob[:cut]
        waiting.set()  # the first half is written: the import waits for the rest
        await asyncio.sleep(3600)  # cancelled by the test
        yield blob[cut:]

    task = asyncio.create_task(importing.run(half_then_wait()))
    await asyncio.wait_for(waiting.wait(), 30)
    assert importing.claimed
    late = ModelStore(
        store.redis, spec_from("late", "ftrl", get_rule("ftrl").params(), None, 64, 8)
    )
    with pytest.raises(ModelImportingError):
        await late.ensure()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not await store.redis.exists(late.keys.meta)  # cleaned up


async def test_an_export_while_a_worker_learns_is_the_state_at_one_step(
    make_store: MakeStore,
) -> None:
    store = await make_store("ftrl", buckets=1024, shards=16)
    await send(store, ROWS, per_entry=1)
    worker = make_worker(store, batch_size=7)  # many small commits: some land mid-export
    running = asyncio.create_task(worker.run())
    blobs = []
    try:
        while not blobs or file_state(blobs[-1])[1].t < len(ROWS):
            blobs.append(await export(store))
    finally:
        worker.stop()
        await asyncio.wait_for(running, 10)
    footers = [file_state(blob)[1] for blob in blobs]
    spanning = [i for i, f in enumerate(footers) if f.source["seq"] > f.source["pinned_seq"]]
    assert spanning, "no export spanned a commit: nothing was rolled forward"
    for index in spanning[:: max(1, len(spanning) // 6)]:
        state, footer = file_state(blobs[index])
        model = InMemoryModel(store.spec.rule, store.spec.params)
        replay(ROWS[: footer.t], model, FeatureHasher(), batch_size=1)
        expected = {feature: row[:-1] for feature, row in model.snapshot().items()}
        assert_same_state(state, expected)
        assert footer.features_tracked == model.features_tracked()
        assert footer.nonzero_weights == model.nonzero_weights()


async def test_buckets_too_large_to_read_whole_are_paged(make_store: MakeStore) -> None:
    store = await make_store("fobos", buckets=64, shards=8)
    await learn(store, ROWS)
    blob = await export(store)
    # Two buckets: thousands of features each, more than scan.lua reads whole.
    crowded = await import_as(store, blob, "crowded", (2, 1))
    prefix = crowded.keys.shard(0).bucket_prefix
    sizes = [await store.redis.hlen(f"{prefix}{bucket}") for bucket in range(2)]
    assert min(sizes) > snapshot_scan.LARGEST_READ_WHOLE
    assert_same_state(await scan_state(store), await scan_state(crowded))
    assert_same_state(file_state(blob)[0], file_state(await export(crowded))[0])
    assert await meta_view(store) == await meta_view(crowded)


async def test_a_pin_keeps_the_redo_entries_an_export_needs(make_store: MakeStore) -> None:
    store = await make_store("ftrl")
    await learn(store, ROWS[:200])
    pinned = await open_export(store.redis, "default")
    await learn(store, ROWS[200:1200])  # ~10 commits, each of which would trim the log
    kept = await store.redis.xrange(store.keys.redo)
    assert int(kept[0][0].split(b"-")[0]) <= pinned.keep and len(kept) >= 10
    blob = b"".join([piece async for piece in pinned.chunks()])  # then releases the pin
    assert file_state(blob)[1].t == 1200
    await learn(store, ROWS[1200:1300])
    assert await store.redis.xlen(store.keys.redo) <= 1
    assert not await store.redis.exists(store.keys.pins)


async def test_an_export_whose_pin_lapsed_fails(make_store: MakeStore) -> None:
    store = await make_store("ftrl")
    await learn(store, ROWS[:200])
    pinned = await open_export(store.redis, "default")
    # The pin's deadline passes (as if the export had stalled for PIN_TTL_MS): the next
    # commit drops it and trims the entries it held.
    await store.redis.hset(store.keys.pins, pinned.token, f"{pinned.keep} 0")
    await learn(store, ROWS[200:400])
    with pytest.raises(ExportFailedError, match="pin on the redo log lapsed"):
        async for _ in pinned.chunks():
            pass
