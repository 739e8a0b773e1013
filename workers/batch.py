"""A group of stream entries: decode, learn, then persist and acknowledge atomically.

The entries are learned as consecutive mini-batches of ``batch_size`` entries, each scored
with the state as it is after the ones before it (so the math is exactly the mini-batch
rule's), against this worker's copy of the state; then the whole group commits at once,
which spreads the cost of a commit over several mini-batches. If another worker commits in
between, the commit script refuses ours; the updates are then recomputed from fresh state with
the same gradient sums, which is what applying the group after the other one would do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from octr.store.codec import EntryError, decode_entries, encode_buckets
from octr.store.state import Commit, ModelStore, StateChange
from online_ctr.features import Batch
from online_ctr.learner import Features, Scored, score, unique_features
from online_ctr.nonzero import nonzero_change
from workers.cache import StateCache

logger = logging.getLogger(__name__)

#: Commit attempts before giving the batch back (it stays pending and is retried later).
MAX_COMMIT_ATTEMPTS = 100


@dataclass
class Decoded:
    """The entries that decoded, as consecutive mini-batches, and the ones that did not."""

    entry_ids: list[str] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    claims: str = ""  # the model's claims counter before the entries were taken

    @property
    def examples(self) -> int:
        return sum(len(batch) for batch in self.batches)


def decode(
    messages: list[tuple[bytes, dict[bytes, bytes]]], claims: str = "", batch_size: int = 0
) -> Decoded:
    """Decode stream messages into mini-batches of ``batch_size`` entries (0: one batch);
    a bad entry is set aside with the reason."""
    decoded = Decoded(claims=claims)
    size = batch_size or max(len(messages), 1)
    for start in range(0, len(messages), size):
        _decode_chunk(messages[start : start + size], decoded)
    return decoded


def _decode_chunk(messages: list[tuple[bytes, dict[bytes, bytes]]], decoded: Decoded) -> None:
    """Decode entries together (numpy once); if that fails, find the bad ones one by one."""
    ids = [raw_id.decode() for raw_id, _ in messages]
    blobs = [fields.get(b"b", b"") for _, fields in messages]
    try:
        decoded.batches.append(decode_entries(blobs))
        decoded.entry_ids += ids
        return
    except EntryError:
        pass
    good: list[bytes] = []
    for entry_id, blob in zip(ids, blobs, strict=True):
        try:
            decode_entries([blob])
        except EntryError as error:
            decoded.failures[entry_id] = f"undecodable entry: {error}"
            continue
        decoded.entry_ids.append(entry_id)
        good.append(blob)
    if good:
        decoded.batches.append(decode_entries(good))


@dataclass(frozen=True)
class Group:
    """A decoded group with its features: per mini-batch, and all of them."""

    batches: list[Batch]
    features: list[Features]
    ids: NDArray[np.uint64]
    buckets: NDArray[np.intp]


def group_of(decoded: Decoded, cache: StateCache) -> Group:
    features = [unique_features(batch) for batch in decoded.batches]
    ids = np.unique(np.concatenate([f.ids for f in features]))
    return Group(decoded.batches, features, ids, np.unique(cache.bucket_of(ids)))


def learn_group(
    store: ModelStore, cache: StateCache, group: Group, scored: list[Scored] | None
) -> tuple[StateChange, list[Scored]]:
    """Apply the mini-batches in order to the cached state (exact at the cache's version),
    scoring each first unless an earlier attempt's ``scored`` is given, and describe the
    change for the commit script. The cache then holds uncommitted rows: it must be
    forgotten unless the commit succeeds."""
    assert cache.version is not None, "learn_group() needs the state the group starts from"
    spec = store.spec
    start, epoch = cache.version
    table = cache.table
    group_rows = table.rows(group.ids, create=True)
    before = table.data[group_rows]
    t = start
    results: list[Scored] = []
    for index, (batch, features) in enumerate(zip(group.batches, group.features, strict=True)):
        rows = table.rows(features.ids, create=False)
        state = table.data[rows, :-1]
        done = scored[index] if scored else score(spec.rule, spec.params, state, t, batch, features)
        new = spec.rule.update(state, done.g, done.g2, t + len(batch), spec.params)
        table.data[rows] = np.column_stack((new, table.data[rows, -1] + done.counts))
        t += len(batch)
        results.append(done)
    after = table.data[group_rows]
    nonzero = nonzero_change(
        spec.rule, spec.params, group.ids, before[:, :-1], start, after[:, :-1], t
    )
    members = cache.members(group.buckets)
    runs, values = encode_buckets(
        table.ids[members], table.data[members], cache.bucket_of(table.ids[members])
    )
    change = StateChange(
        t=start,
        epoch=epoch,
        examples=t - start,
        logloss_sum=float(sum(r.losses.sum() for r in results)),
        bucket_runs=runs,
        bucket_values=values,
        leaving=nonzero.leaving,
        entering=nonzero.entering,
        entering_steps=nonzero.entering_steps,
        stable_delta=nonzero.stable_delta,
        tracked_delta=int((before[:, -1] == 0).sum()),
    )
    return change, results


async def load_state(store: ModelStore, cache: StateCache, buckets: NDArray[np.intp]) -> None:
    """Bring the cache to the model's current version for these buckets."""
    if not cache.load(await store.read(cache.unknown(buckets))):
        cache.load(await store.read(buckets))


async def apply(
    store: ModelStore,
    cache: StateCache,
    consumer: str,
    decoded: Decoded,
    on_conflict: Callable[[], None] = lambda: None,
) -> tuple[Commit, list[Scored]]:
    """Learn the decoded mini-batches and commit them; retried on conflicts."""
    assert decoded.batches, "apply() needs at least one decoded entry"
    group = group_of(decoded, cache)
    await load_state(store, cache, group.buckets)
    scored: list[Scored] | None = None
    for _ in range(MAX_COMMIT_ATTEMPTS):
        change, scored = learn_group(store, cache, group, scored)
        result = await store.commit(change, consumer, decoded.entry_ids, decoded.claims)
        if result.status == "ok":
            cache.version = (result.t, change.epoch)
            return result, scored
        cache.forget()
        if result.status != "conflict":
            return result, scored
        on_conflict()
        await load_state(store, cache, group.buckets)
    return Commit(status="conflict", t=-1), scored or []
