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
from online_ctr.learner import Features, Scored, score, unique_features
from online_ctr.nonzero import nonzero_change
from service.store.codec import EntryError, decode_entries
from service.store.state import Commit, ModelStore, Placement, Read, StateChange
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


def decode(messages: list[tuple[bytes, dict[bytes, bytes]]]) -> Decoded:
    """Decode stream messages together; a bad entry is set aside with the reason."""
    ids = [raw_id.decode() for raw_id, _ in messages]
    blobs = [fields.get(b"b", b"") for _, fields in messages]
    try:
        return Decoded(ids, decode_entries(blobs)) if ids else Decoded()
    except EntryError:
        pass  # find the bad entries one by one; the rest still make a batch
    decoded = Decoded()
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
    store: ModelStore,
    features: Features,
    placement: Placement,
    read: Read,
    scored: Scored,
    loss: float,
) -> StateChange:
    """What applying a scored batch on top of ``read`` changes, for the commit script."""
    spec = store.spec
    examples = len(scored.losses)
    new_t = read.t + examples
    new_rule_state = spec.rule.update(read.rule_state, scored.g, scored.g2, new_t, spec.params)
    nonzero = nonzero_change(
        spec.rule, spec.params, features.ids, read.rule_state, read.t, new_rule_state, new_t
    )
    counts = read.state[:, -1] + scored.counts
    return StateChange(
        placement=placement,
        t=read.t,
        epoch=read.epoch,
        examples=examples,
        logloss_sum=loss,
        state=np.column_stack((new_rule_state, counts)),
        leaving=nonzero.leaving,
        entering=nonzero.entering,
        entering_steps=nonzero.entering_steps,
        stable_delta=nonzero.stable_delta,
        tracked_delta=int((~read.known).sum()),
    )


async def current_state(store: ModelStore, cache: StateCache, ids: NDArray[np.uint64]) -> Read:
    """The state of ``ids`` now: from the cache where it is exact, the rest from Redis."""
    rows = cache.rows(ids)
    missing = rows < 0
    read = await store.read(store.place(ids[missing]))
    if cache.matches(read):
        state = np.empty((len(ids), read.state.shape[1]))
        state[~missing] = cache.table.data[rows[~missing]]
        state[missing] = read.state
        return Read(read.t, read.epoch, state)
    if missing.all():
        return read
    cache.forget()
    return await store.read(store.place(ids))


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
    placement = store.place(features.ids)
    spec = store.spec
    read = await current_state(store, cache, features.ids)
    scored = score(spec.rule, spec.params, read.rule_state, read.t, batch, features)
    loss = float(scored.losses.sum())
    for _ in range(MAX_COMMIT_ATTEMPTS):
        change = state_change(store, features, placement, read, scored, loss)
        result = await store.commit(change, consumer, decoded.entry_ids)
        if result.status == "ok":
            cache.remember(features.ids, change.state, result.t, read.epoch)
        if result.status != "conflict":
            return result, scored
        on_conflict()
        cache.forget()
        read = await store.read(placement)
    return Commit(status="conflict", t=read.t), scored
