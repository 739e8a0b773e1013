"""One batch of stream entries: decode, compute, then persist and acknowledge atomically.

Predictions (and so the progressive log loss) use the state as read at the batch's start. If
another worker commits in between, the commit script refuses ours; the update is then
recomputed from fresh state with the same gradient sums, which is what a sequential
application of the batch after the other one would do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from online_ctr.features import Batch
from online_ctr.learner import Scored, score, unique_features
from online_ctr.nonzero import nonzero_change
from service.store.codec import EntryError, decode_entries, encode_buckets
from service.store.state import Commit, ModelStore, StateChange
from workers.cache import StateCache

logger = logging.getLogger(__name__)

#: Commit attempts before giving the batch back (it stays pending and is retried later).
MAX_COMMIT_ATTEMPTS = 100


@dataclass
class Decoded:
    """The entries of a batch that decoded, as one batch, and the ones that did not."""

    entry_ids: list[str] = field(default_factory=list)
    batch: Batch | None = None
    failures: dict[str, str] = field(default_factory=dict)
    claims: str = ""  # the model's claims counter before the entries were taken


def decode(messages: list[tuple[bytes, dict[bytes, bytes]]], claims: str = "") -> Decoded:
    """Decode stream messages together; a bad entry is set aside with the reason."""
    ids = [raw_id.decode() for raw_id, _ in messages]
    blobs = [fields.get(b"b", b"") for _, fields in messages]
    try:
        return Decoded(ids, decode_entries(blobs), claims=claims) if ids else Decoded()
    except EntryError:
        pass  # find the bad entries one by one; the rest still make a batch
    decoded = Decoded(claims=claims)
    good: list[bytes] = []
    for entry_id, blob in zip(ids, blobs, strict=True):
        try:
            decode_entries([blob])
        except EntryError as error:
            decoded.failures[entry_id] = f"undecodable entry: {error}"
            continue
        decoded.entry_ids.append(entry_id)
        good.append(blob)
    decoded.batch = decode_entries(good) if good else None
    return decoded


def state_change(
    store: ModelStore, cache: StateCache, rows: NDArray[np.intp], scored: Scored, loss: float
) -> StateChange:
    """Apply a scored batch to the cached state of its features (``rows`` of the cache, at
    the cache's version) and describe the change for the commit script. The cache then holds
    the uncommitted rows: it must be forgotten unless the commit succeeds."""
    assert cache.version is not None, "state_change() needs the state the batch was read at"
    spec = store.spec
    t, epoch = cache.version
    examples = len(scored.losses)
    old = cache.table.data[rows]
    new_rule_state = spec.rule.update(old[:, :-1], scored.g, scored.g2, t + examples, spec.params)
    ids = cache.table.ids[rows]
    nonzero = nonzero_change(
        spec.rule, spec.params, ids, old[:, :-1], t, new_rule_state, t + examples
    )
    cache.table.data[rows] = np.column_stack((new_rule_state, old[:, -1] + scored.counts))
    members = cache.members(np.unique(cache.bucket_of(ids)))
    runs, values = encode_buckets(
        cache.table.ids[members],
        cache.table.data[members],
        cache.bucket_of(cache.table.ids[members]),
    )
    return StateChange(
        t=t,
        epoch=epoch,
        examples=examples,
        logloss_sum=loss,
        bucket_runs=runs,
        bucket_values=values,
        leaving=nonzero.leaving,
        entering=nonzero.entering,
        entering_steps=nonzero.entering_steps,
        stable_delta=nonzero.stable_delta,
        tracked_delta=int((old[:, -1] == 0).sum()),
    )


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
) -> tuple[Commit, Scored]:
    """Learn from the decoded entries and commit; retried on conflicts with other workers."""
    batch = decoded.batch
    assert batch is not None, "apply() needs at least one decoded entry"
    features = unique_features(batch)
    buckets = np.unique(cache.bucket_of(features.ids))
    spec = store.spec
    await load_state(store, cache, buckets)
    rows = cache.table.rows(features.ids, create=True)
    assert cache.version is not None
    state = cache.table.data[rows, :-1]
    scored = score(spec.rule, spec.params, state, cache.version[0], batch, features)
    loss = float(scored.losses.sum())
    for _ in range(MAX_COMMIT_ATTEMPTS):
        change = state_change(store, cache, rows, scored, loss)
        result = await store.commit(change, consumer, decoded.entry_ids, decoded.claims)
        if result.status == "ok":
            cache.version = (result.t, change.epoch)
            return result, scored
        cache.forget()
        if result.status != "conflict":
            return result, scored
        on_conflict()
        await load_state(store, cache, buckets)
        rows = cache.table.rows(features.ids, create=True)
    return Commit(status="conflict", t=-1), scored
