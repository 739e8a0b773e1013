"""Appending feedback to a model's stream, at most once per idempotency key.

A ``/learn`` request may carry an ``Idempotency-Key``. ``append.lua`` checks the key, appends
the entry and records the key with the digest of what was appended, all in one script: if the
client never hears the answer (a timeout while Redis stalls, then Redis runs the script
anyway), its retry with the same key finds the record and is answered as the first attempt
was, without a second entry. The record expires after the idempotency window.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from octr.redis_types import RedisClient
from octr.store import codec
from octr.store.keys import ModelKeys
from online_ctr.features import Batch


class IdempotencyConflictError(ValueError):
    """An idempotency key reused, within the window, for different feedback."""


@dataclass(frozen=True)
class Appended:
    """What an append answered: how many examples it accepted, and whether it is a replay of
    an earlier request with the same key (then nothing new was appended)."""

    accepted: int
    replayed: bool = False


class FeedbackLog:
    """The write side of one model's feedback stream."""

    def __init__(self, redis: RedisClient, model: str, window_s: int) -> None:
        self.redis = redis
        self.keys = ModelKeys(model)
        self.window_s = window_s
        script = resources.files("octr.store").joinpath("append.lua").read_text()
        self._append = redis.register_script(script)

    async def append(self, batch: Batch, key: str | None = None) -> Appended:
        """Append a labelled batch as one entry; with ``key``, at most once per window."""
        entry = codec.encode_entry(batch)
        if key is None:
            await self.redis.xadd(self.keys.stream, {"b": entry})
            return Appended(len(batch))
        # The digest of the encoded entry: the same examples in the same order match, however
        # the JSON was spaced or its numbers written.
        record = f"{hashlib.sha256(entry).hexdigest()} {len(batch)}"
        appended, stored = await self._append(
            keys=[self.keys.stream, self.keys.idempotency(key)],
            args=[entry, record, self.window_s],
        )
        if appended:
            return Appended(len(batch))
        digest, accepted = stored.decode().split()
        if digest != record.split()[0]:
            raise IdempotencyConflictError(
                f"Idempotency-Key {key!r} was used in the last {self.window_s}s for a request "
                "with other examples; use a new key for a new request"
            )
        return Appended(int(accepted), replayed=True)
