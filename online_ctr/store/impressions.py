"""Logged impressions: served predictions waiting for their clicks, in Redis.

Three scripts, each atomic, all on the keys of one feedback hash tag (:class:`FeedbackKeys`),
so that one call appends to the streams of every model that learns that feedback:

- ``impressions_log.lua`` logs a scoring pass: per example a hash ``{b, p, m, s}`` (the
  example as a one-example entry labelled 0, the served probability, the model, the state),
  and ``w``, its weight as a non-click, for a model that samples them (``negatives.lua``),
  that expires after twice the window, and its deadline in the pending set; whole requests,
  while the pending set holds fewer than ``OCTR_MAX_PENDING_IMPRESSIONS``;
- ``join.lua`` sets a pending impression's label, appends it and leaves a tombstone
  (``s=labelled``, for one window) so a repeated or late label gets a precise answer;
- ``sweep.lua`` closes the windows that are due: negatives appended (or dropped), tombstones.

A tombstone keeps only ``{m, s}``: both scripts delete the entry and the probability.

Deadlines are Redis's clock (``TIME``), so API processes and workers never compare theirs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray
from redis.exceptions import OutOfMemoryError

from online_ctr.config.join_policy import JoinPolicy
from online_ctr.store.idempotency import KeyLimits, script_args
from online_ctr.store.keys import FeedbackKeys
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.replication import ReplicaAcks
from online_ctr.store.scripts import register

#: Most windows one sweep call closes: bounds how long Redis is busy with it.
SWEEP_COUNT = 2000


#: Why a request's impressions were not logged: the pending set was full, or Redis refused
#: the write at its memory limit (``maxmemory`` with ``noeviction``).
UnloggedReason = Literal["limit", "redis_memory"]


class JoinConflictError(ValueError):
    """An Idempotency-Key reused, within its window, for other labels."""


@dataclass(frozen=True)
class Joined:
    """Per prediction id its join.lua outcome code, whether this replays an earlier request
    with the same Idempotency-Key (then nothing new was appended), and how many records of
    other keys it dropped to stay within the limit."""

    codes: str
    replayed: bool = False
    evicted: int = 0


@dataclass(frozen=True)
class PassLog:
    """What logging a pass did: the (0-based) examples whose id was used before (their
    requests logged nothing), and the requests left unlogged for ``reason``."""

    clashes: list[int]
    unlogged: list[int]
    reason: UnloggedReason = "limit"


@dataclass(frozen=True)
class Swept:
    """What a sweep did: ids taken off the pending set (fewer than asked: none left due),
    windows closed, of them appended as negatives, and impressions that had expired before
    their window was swept."""

    taken: int
    closed: int
    negatives: int
    expired: int


class Impressions:
    """The impressions of one feedback tag, appended on join to ``streams`` (all of that tag)."""

    def __init__(
        self,
        redis: RedisClient,
        keys: FeedbackKeys,
        streams: list[str],
        policy: JoinPolicy,
        acks: ReplicaAcks | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.streams = streams
        self.policy = policy
        #: Joins are /learn's: replicated before their 202 (:mod:`online_ctr.store.ingest`).
        self.acks = acks or ReplicaAcks(redis)
        self._log = register(redis, "impressions_log")
        self._join = register(redis, "join")
        self._sweep = register(redis, "sweep")

    async def log(
        self,
        ids: Sequence[str],
        entries: Sequence[bytes],
        probabilities: Sequence[float],
        model: str,
        sizes: Sequence[int],
        most: int,
        negative_weights: NDArray[np.float64] | None = None,
    ) -> PassLog:
        """Log a pass's impressions (its requests of ``sizes`` examples, in order), whole
        requests while the pending set holds at most ``most``; says which were not logged.
        ``negative_weights``: each impression's weight should it end a non-click (0: it is
        then sampled out), under its model's negative rate; None: each is learned as it is."""
        served = np.asarray(probabilities, "<f8").tobytes()
        args: list[bytes | str | int] = [self.policy.window_ms, model, most, len(sizes), *sizes]
        weights = b"" if negative_weights is None else np.asarray(negative_weights, "<f8").tobytes()
        for j, (prediction_id, entry) in enumerate(zip(ids, entries, strict=True)):
            weight = weights[8 * j : 8 * j + 8]
            args += [prediction_id, entry, served[8 * j : 8 * j + 8], weight]
        keys = [self.keys.pending, *map(self.keys.impression, ids)]
        try:
            clashes, unlogged = await self._log(keys=keys, args=args)
        except OutOfMemoryError:
            # Refused at its first write (a script that has not written yet is stopped there,
            # one that has is let finish), so nothing of the pass was written.
            return PassLog([], list(range(len(sizes))), "redis_memory")
        return PassLog([int(j) for j in clashes], [int(r) for r in unlogged])

    async def pending_count(self) -> int:
        """How many impressions wait for a label (ZCARD of the pending set)."""
        return int(await self.redis.zcard(self.keys.pending))

    async def join(
        self, ids: Sequence[str], labels: Sequence[int], key: str | None, limits: KeyLimits
    ) -> Joined:
        """Label the impressions ``ids`` in order; with an Idempotency-Key ``key``, at most
        once per window, its record kept within ``limits`` (a retry answers as the first
        attempt did)."""
        pairs = [str(part) for pair in zip(ids, labels, strict=True) for part in pair]
        digest = hashlib.sha256("\n".join(pairs).encode()).hexdigest()
        record = self.keys.idempotency(key) if key is not None else self.keys.pending
        args = [
            len(self.streams),
            self.policy.window_ms,
            limits.window_s if key is not None else "",
            digest,
            self.policy.late_code,
            *script_args(self.keys, limits),
            *pairs,
        ]
        impressions = map(self.keys.impression, ids)
        index = self.keys.idempotency_index
        keys = [self.keys.pending, record, *self.streams, *impressions, index]
        fresh, answer, *evicted = await self._join(keys=keys, args=args)
        await self.acks.confirm(self.keys.pending)
        answer = answer.decode()
        if fresh:
            return Joined(answer, evicted=int(evicted[0]))
        stored_digest, _, codes = answer.partition(" j")
        if stored_digest != digest or not codes:
            raise JoinConflictError(
                f"Idempotency-Key {key!r} was used in the last {limits.window_s}s for a request "
                "with other examples; use a new key for a new request"
            )
        return Joined(codes, replayed=True)

    async def sweep(self, count: int = SWEEP_COUNT) -> Swept:
        """Close up to ``count`` windows that are due (Redis's clock)."""
        prefix = self.keys.impression("")
        args: list[str | int] = [prefix, count, self.policy.unlabeled, self.policy.window_ms]
        taken, closed, expired = await self._sweep(
            keys=[self.keys.pending, *self.streams], args=args
        )
        negatives = int(closed) if self.policy.unlabeled == "negative" else 0
        return Swept(int(taken), int(closed), negatives, int(expired))
