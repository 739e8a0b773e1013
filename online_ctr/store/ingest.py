"""Appending feedback to a model's stream, at most once per idempotency key.

The entry goes to the stream of every model it is for: one model, or every model of a group
(their streams share the group's hash tag), in one script that first checks that each model
still exists, so that feedback is never accepted into the stream of a deleted model.

A ``/learn`` request may carry an ``Idempotency-Key``. ``append.lua`` checks the key, appends
the entry and records the key with the digest of what was appended, all in one script: if the
client never hears the answer (a timeout while Redis stalls, then Redis runs the script
anyway), its retry with the same key finds the record and is answered as the first attempt
was, without a second entry. The record expires after the idempotency window, or is dropped
sooner, oldest first, when the tag holds ``OCTR_MAX_IDEMPOTENCY_KEYS`` records
(:mod:`online_ctr.store.idempotency`).

With replica acknowledgements on (:mod:`online_ctr.store.replication`), an append returns only
once the tag's replicas hold it, on the replayed-key path too: the first attempt may have
failed in its wait, and a retry's 202 promises what the first one's would have.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from online_ctr.learning.features import Batch
from online_ctr.learning.sampling import check_rate, keep_negatives
from online_ctr.store import codec
from online_ctr.store.idempotency import KeyLimits, script_args
from online_ctr.store.keys import FeedbackKeys, ModelKeys
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.replication import ReplicaAcks
from online_ctr.store.scripts import register


class ModelDeletedError(LookupError):
    """A model the feedback was for was deleted meanwhile; nothing was appended."""


class IdempotencyConflictError(ValueError):
    """An idempotency key reused, within the window, for different feedback."""


@dataclass(frozen=True)
class Appended:
    """What an append answered: how many examples it accepted, whether it is a replay of an
    earlier request with the same key (then nothing new was appended), how many records of
    other keys it dropped to stay within the limit, and how many of the non-clicks it
    accepted the negative rate left off the stream (none counted again for a replay)."""

    accepted: int
    replayed: bool = False
    evicted: int = 0
    sampled_out: int = 0


class FeedbackLog:
    """The write side of the feedback streams of a model, or of every model of a group;
    ``negative_rate``: the fraction of the non-clicks it keeps (the model's, the group's),
    chosen here, before the stream (:mod:`online_ctr.learning.sampling`)."""

    def __init__(
        self,
        redis: RedisClient,
        feedback: FeedbackKeys,
        models: list[ModelKeys],
        limits: KeyLimits,
        acks: ReplicaAcks | None = None,
        negative_rate: float = 1.0,
    ) -> None:
        check_rate(negative_rate)
        self.negative_rate = negative_rate
        self.redis = redis
        self.feedback = feedback
        self.models = models
        self.limits = limits
        self.acks = acks or ReplicaAcks(redis)
        self._append = register(redis, "append")

    async def append(self, batch: Batch, key: str | None = None) -> Appended:
        """Append a labelled batch as one entry, its non-clicks sampled at the negative rate;
        with ``key``, at most once per window. ``batch`` is what the key's record is of, and
        what is counted as accepted; when nothing of it is kept, nothing is appended, but the
        key is checked and recorded all the same."""
        kept = keep_negatives(batch, self.negative_rate)  # ``batch`` itself at rate 1
        entry = codec.encode_entry(kept) if len(kept) else b""
        # The digest of the encoded request: the same examples in the same order match,
        # however the JSON was spaced or its numbers written.
        request = entry if kept is batch or not key else codec.encode_entry(batch)
        return await self._appended([entry], request, len(batch), len(kept), key)

    async def append_each(self, batches: list[Batch], key: str | None = None) -> Appended:
        """Append the same examples hashed for each model (its crosses), ``batches[i]`` to the
        stream of model ``i``, in one atomic step; only at a negative rate of 1 (a sample is
        taken by a hash of the ids, which differ: the registry makes sure)."""
        if self.negative_rate != 1.0 or len(batches) != len(self.models):
            raise ValueError("one batch per model, and no negative sampling")
        entries = [codec.encode_entry(batch) for batch in batches]
        count = len(batches[0])
        return await self._appended(entries, b"".join(entries), count, count, key)

    async def _appended(
        self, entries: list[bytes], request: bytes, count: int, kept: int, key: str | None
    ) -> Appended:
        """Append ``entries`` (one for every stream, or one each), checking and recording
        ``key`` with the digest of ``request``, of ``count`` examples (``kept`` appended)."""
        record = f"{hashlib.sha256(request).hexdigest()} {count}" if key else ""
        metas = [keys.meta for keys in self.models]
        streams = [keys.stream for keys in self.models]
        index = self.feedback.idempotency_index
        window = self.limits.window_s
        args = [entries[0], record, window, len(self.models), int(key is not None)]
        appended, stored, *evicted = await self._append(
            keys=[self.feedback.idempotency(key or ""), *metas, *streams, index],
            args=[*args, *script_args(self.feedback, self.limits), *entries[1:]],
        )
        if appended == -1:
            raise ModelDeletedError(f"{stored.decode()} was deleted")
        await self.acks.confirm(index)
        if appended == 1:
            return Appended(count, evicted=int(evicted[0]), sampled_out=count - kept)
        digest, accepted = stored.decode().split()
        if digest != record.split()[0]:
            raise IdempotencyConflictError(
                f"Idempotency-Key {key!r} was used in the last {window}s for a request "
                "with other examples; use a new key for a new request"
            )
        return Appended(int(accepted), replayed=True)
