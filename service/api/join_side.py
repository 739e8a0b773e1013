"""The join side of a served model: log each scored pass's impressions, join labels sent by
prediction id, and say what became of each (see :mod:`online_ctr.config.join_policy`).

With joins off (a window of 0) nothing is logged, and a prediction id sent to either endpoint
is a 422 that says how to turn them on.

At ``OCTR_MAX_PENDING_IMPRESSIONS``, or with Redis refusing writes at its memory limit,
``/predict`` still answers: an ad server needs its score, and a 429 would let one client
that predicts and never labels stop serving for everyone on the model. The requests that do
not fit are answered unlogged (``prediction_id`` null; a label sent for them is unknown) and
counted in ``online_ctr_unlogged_impressions_total`` by reason.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

from online_ctr.config.join_policy import TURN_ON, JoinPolicy, detail, outcome
from online_ctr.learning.features import Batch
from online_ctr.learning.sampling import negative_weights
from online_ctr.metrics import Metrics
from online_ctr.store import codec
from online_ctr.store.idempotency import KeyLimits
from online_ctr.store.impressions import Impressions, Joined, PassLog
from online_ctr.store.keys import ModelKeys
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.replication import ReplicaAcks
from service.api.errors import ApiError
from service.api.limits import InvalidFieldError

#: Random bytes in a generated prediction id: 128 bits, 22 url-safe characters.
ID_BYTES = 16

#: Per request of a pass: its prediction ids (None for each if it was not logged), and those
#: of its examples already used before (as ``(index, id)``; then the request logged nothing).
Logged = tuple[list[str | None], list[tuple[int, str]]]


class PredictionIdUsedError(ApiError):
    status_code = 409


def generated_ids(count: int) -> list[str]:
    """``count`` new prediction ids: one ``os.urandom`` call for them all."""
    raw = os.urandom(ID_BYTES * count)
    chunks = (raw[ID_BYTES * j : ID_BYTES * (j + 1)] for j in range(count))
    return [base64.urlsafe_b64encode(chunk).rstrip(b"=").decode() for chunk in chunks]


def used_error(used: list[tuple[int, str]], single: bool) -> PredictionIdUsedError:
    """The 409 for a /predict request that reused prediction ids."""
    if single:
        return PredictionIdUsedError(
            f"prediction_id {used[0][1]!r} is already used for a prediction; use a new id per "
            "impression"
        )
    listed = ", ".join(f"examples[{index}] {id_!r}" for index, id_ in used)
    return PredictionIdUsedError(
        f"prediction_ids already used for a prediction: {listed}; use a new id per impression "
        "(nothing of this request was logged)"
    )


class ServedJoins:
    """Impression logging and label joins for one served model (``keys``), whose joined
    labels go to ``streams``: its own, or every model's of its group."""

    def __init__(
        self,
        redis: RedisClient,
        keys: ModelKeys,
        streams: list[str],
        policy: JoinPolicy,
        metrics: Metrics,
        key_limits: KeyLimits,
        max_pending: int,
        acks: ReplicaAcks | None = None,
        negative_rate: float = 1.0,
    ) -> None:
        model = keys.model
        #: The model's (group's) negative rate: a non-click is sampled as at /learn.
        self.negative_rate = negative_rate
        self.model = model
        self.policy = policy
        self.key_limits = key_limits
        self.max_pending = max_pending
        self.impressions = Impressions(redis, keys.feedback, streams, policy, acks)
        self._outcomes = {
            name: metrics.joined_labels.labels(model, name)
            for name in ("learned", "unknown", "repeated", "late")
        }
        self._evicted = metrics.idempotency_keys_evicted.labels(model)
        self._unlogged = {
            reason: metrics.unlogged_impressions.labels(model, reason)
            for reason in ("limit", "redis_memory")
        }
        self._memory_refusals = metrics.redis_memory_refusals.labels("impressions")

    def check(self, ids: object | None, field: str = "prediction_id") -> None:
        """A 422 for prediction ids sent to a model without joins."""
        if ids is not None and not self.policy.on:
            raise InvalidFieldError(field, TURN_ON)

    async def log(
        self,
        requests: Sequence[tuple[int, Sequence[str | None] | None]],
        batch: Batch,
        p: list[float],
    ) -> list[Logged]:
        """Log the impressions of a pass, before any answer is sent: ``requests`` are each
        request's example count and caller ids (None where it sent none); nothing with joins
        off."""
        if not self.policy.on:
            return []
        made = iter(generated_ids(len(p)))
        ids: list[str] = []
        for size, given in requests:
            ids.extend(i or next(made) for i in (given or [None] * size))
        sizes = [size for size, _ in requests]
        entries = codec.encode_rows(batch)
        rate = self.negative_rate
        weights = negative_weights(batch, rate) if rate < 1.0 else None
        done = await self.impressions.log(
            ids, entries, p, self.model, sizes, self.max_pending, weights
        )
        self._count(done, sizes)
        clashes, unlogged = set(done.clashes), set(done.unlogged)
        logged: list[Logged] = []
        start = 0
        for r, size in enumerate(sizes):
            mine: list[str | None] = (
                [None] * size if r in unlogged else [*ids[start : start + size]]
            )
            used = [(j, ids[start + j]) for j in range(size) if start + j in clashes]
            logged.append((mine, used))
            start += size
        return logged

    def _count(self, done: PassLog, sizes: list[int]) -> None:
        """Count the impressions answered unlogged, and a write Redis refused for memory."""
        if done.unlogged:
            self._unlogged[done.reason].inc(sum(sizes[r] for r in done.unlogged))
        if done.reason == "redis_memory":
            self._memory_refusals.inc()

    async def pending_count(self) -> int:
        """Impressions waiting for a label in this model's feedback tag (its group's)."""
        return await self.impressions.pending_count()

    async def join(self, ids: list[str], labels: list[int], key: str | None) -> Joined:
        """Join labels to their impressions (a 422 with joins off), counting the outcomes."""
        self.check(ids)
        joined = await self.impressions.join(ids, labels, key, self.key_limits)
        if not joined.replayed:
            for code in joined.codes:
                self._outcomes[outcome(code)].inc()
        if joined.evicted:
            self._evicted.inc(joined.evicted)
        return joined


def join_answer(joined: Joined, ids: list[str], single: bool) -> tuple[int, dict[str, object]]:
    """The status and body of a join request: per label learned or refused, and why."""
    if single:
        code = joined.codes[0]
        if code == "0":
            return 202, {"accepted": 1}
        return (404 if code == "1" else 409), {"detail": detail(ids[0], code)}
    rejected = [
        {
            "index": j,
            "prediction_id": ids[j],
            "reason": outcome(code),
            "detail": detail(ids[j], code),
        }
        for j, code in enumerate(joined.codes)
        if code != "0"
    ]
    return 202, {"accepted": joined.codes.count("0"), "rejected": rejected}
