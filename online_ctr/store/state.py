"""A model in Redis: what it is (:class:`ModelSpec`), and the store the API and the worker
share (:class:`ModelStore`).

The layout of the keys is in :mod:`online_ctr.store.keys`, of the bytes in
:mod:`online_ctr.store.layout`;
reading and writing state per touched feature is :mod:`online_ctr.store.shards` (and serving from a
copy of hot features, :mod:`online_ctr.store.replica`), committing learned
groups exactly once is :mod:`online_ctr.store.commits`, the single learner's lease
:mod:`online_ctr.store.lease`.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray
from redis.exceptions import NoPermissionError, TryAgainError

from online_ctr.learning import eviction, retention
from online_ctr.learning.admission import (
    ADMIT_ALL,
    COUNTERS,
    Admission,
    Tally,
    features_pending,
    parse_recent,
)
from online_ctr.learning.base_rate import MEAN, BaseRate, check_state
from online_ctr.learning.budget import Budget
from online_ctr.learning.calibration import Calibration, Histogram, PowerFit
from online_ctr.learning.compact import CompactCodec, check_encoding
from online_ctr.learning.crosses import Crosses, crosses_text, parse_crosses
from online_ctr.learning.eviction import UNBOUNDED, Evicting, check_max_features
from online_ctr.learning.numeric import Numeric
from online_ctr.learning.retention import NEVER, check_expire_after, live
from online_ctr.learning.rules import Rule, get_rule
from online_ctr.learning.rules.base import Array
from online_ctr.store import idempotency
from online_ctr.store.calibration_codec import HISTOGRAM_FIELD, decode_fit, decode_histogram
from online_ctr.store.change_notices import ChangeNotices
from online_ctr.store.commits import CommitLog
from online_ctr.store.failures import pipeline
from online_ctr.store.filter import make_filters
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Layout
from online_ctr.store.redis_types import RedisClient, text
from online_ctr.store.replica import Fresh, StateReplica
from online_ctr.store.replication import ReplicaAcks
from online_ctr.store.scripts import Scripts
from online_ctr.store.shards import BASE_FIELDS, Runs, StateShards, StoredRows

logger = logging.getLogger(__name__)


class ModelMismatchError(RuntimeError):
    """The model in Redis was created with another rule, hyper-parameters or layout."""


class ModelGoneError(LookupError):
    """The model was deleted (and is not one that is created on first use)."""


class ModelDamagedError(ValueError):
    """A value stored in the model's meta is not one it can hold (a step that is no whole
    number): nothing can be learned until it is mended. The message is one line naming it."""


class ModelImportingError(TryAgainError):
    """The model is being imported from a snapshot: not there yet, so try again shortly (a
    TRYAGAIN, so the API answers 503 with Retry-After and a worker waits, as for Redis)."""


@dataclass(frozen=True)
class ModelSpec:
    """What a model is: its rule, hyper-parameters, feature hashing, state layout and the
    encoding of its state (``float64``, or ``compact``: see :mod:`online_ctr.learning.compact`)."""

    name: str
    rule: Rule
    params: Any
    hash_bits: int | None
    buckets: int
    shards: int = 64
    encoding: str = "float64"
    numeric: Numeric = "raw"
    calibration: Calibration = "off"
    #: The group whose feedback the model learns (its log side is in the group's hash tag).
    group: str | None = None
    #: Which new features get state (:mod:`online_ctr.learning.admission`).
    admission: Admission = ADMIT_ALL
    #: Features untouched for this many examples are gone (:mod:`online_ctr.learning.
    #: retention`; 0: never). Each stored row then ends with the feature's last step.
    expire_after: int = NEVER
    #: At most this many features are held, the least recently touched evicted first
    #: (:mod:`online_ctr.learning.eviction`; 0: no budget). Each stored row then ends with the
    #: feature's last step too.
    max_features: int = UNBOUNDED
    #: The base-rate prior added to each logit (:mod:`online_ctr.learning.base_rate`).
    base_rate: BaseRate = MEAN
    #: Pairs of fields crossed (:mod:`online_ctr.learning.crosses`; none by default).
    crosses: Crosses = ()

    def __post_init__(self) -> None:
        check_encoding(self.encoding, self.rule.name)
        check_expire_after(self.expire_after)
        retention.check_encoding(self.expire_after, self.encoding)
        check_max_features(self.max_features)
        retention.check_encoding(self.max_features, self.encoding, ("max_features", "encoding"))
        retention.check_one_bound(self.expire_after, self.max_features)

    def describe(self) -> dict[str, str]:
        """The spec as stored in the model's meta hash."""
        return {
            "rule": self.rule.name,
            "params": json.dumps(vars(self.params), sort_keys=True),
            "hash_bits": str(self.hash_bits or 64),
            "buckets": str(self.buckets),
            "shards": str(self.shards),
            "encoding": self.encoding,
            "fields": ",".join(self.rule.fields),
            "numeric": self.numeric,
            "calibration": self.calibration,
            "group": self.group or "",
            "admission": self.admission.text,
            "expire_after": str(self.expire_after),
            "max_features": str(self.max_features),
            "base_rate": self.base_rate.text,
            "crosses": crosses_text(self.crosses),
        }

    @property
    def stepped(self) -> bool:
        """Whether each stored row ends with its feature's last step (to expire, or evict)."""
        return self.expire_after != NEVER or self.max_features != UNBOUNDED

    @property
    def width(self) -> int:
        """Values per stored state row: the rule's fields, then with ``expire_after`` or
        ``max_features`` the feature's last step."""
        return len(self.rule.fields) + self.stepped

    def weights(self, state: Array, t: int, cut_all: int = 0) -> Array:
        """The weights at step ``t`` of stored rows (zero rows for features not stored):
        0 where a feature is gone (:mod:`online_ctr.learning.retention`), or evicted by a
        budget whose cutoff of all features is ``cut_all`` (:mod:`online_ctr.learning.
        eviction`: a feature evicted as a zero weight has a zero weight)."""
        w = self.rule.weights(self.fields_of(state), t, self.params)
        if self.expire_after:
            w[~live(state[:, -1], t, self.expire_after)] = 0.0
        if self.max_features:
            w[state[:, -1] <= cut_all] = 0.0
        return w

    def weightless(self, state: Array) -> NDArray[np.bool_]:
        """Which stored rows had a zero weight at their last step (a budget's zero class)."""
        return eviction.weightless(self.rule, self.params, self.fields_of(state), state[:, -1])

    def held(self, state: Array, marks: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Which stored rows a feature budget of ``marks`` still holds."""
        return eviction.held(state[:, -1], self.weightless(state), marks)

    def rates(self, state: Array, t: int) -> Array:
        """The per-coordinate step sizes at step ``t`` of stored rows."""
        return self.rule.rates(self.fields_of(state), t, self.params)

    def fields_of(self, state: Array) -> Array:
        """The rule's fields of stored rows (without the step column)."""
        return state[:, : len(self.rule.fields)] if self.stepped else state

    @property
    def layout(self) -> Layout:
        compact = (
            CompactCodec.of(self.rule.name, self.params) if self.encoding == "compact" else None
        )
        return Layout(self.buckets, self.shards, self.hash_bits or 64, self.width, compact)


@dataclass(frozen=True)
class Serving:
    """Features' weights as of now, their step sizes if asked for, and the calibration."""

    weights: Array
    rates: Array | None
    fit: PowerFit | None
    #: The base-rate prior's offset to every logit (:mod:`online_ctr.learning.base_rate`).
    base_logit: float = 0.0


@dataclass(frozen=True)
class ModelInfo:
    """A model's description and counters, as ``GET /models/{name}`` reports them."""

    name: str
    rule: str
    params: dict[str, float]
    hash_bits: int
    t: int
    nonzero_weights: int
    features_tracked: int
    logloss_sum: float
    stream_lag: int
    dead_letters: int
    numeric: str = "raw"
    calibration: str = "off"
    #: The learned examples' importance weights less 1, summed (0 when none had a weight).
    weight_excess: float = 0.0
    #: Which new features get state (:mod:`online_ctr.learning.admission`).
    admission: str = "all"
    #: Features untouched for this many examples are deleted (0: never), and how many times a
    #: feature has been (:mod:`online_ctr.learning.retention`).
    expire_after: int = 0
    features_expired: int = 0
    #: The most features held (0: no budget), how many the budget has evicted
    #: (:mod:`online_ctr.learning.eviction`), and how many it holds (of those tracked, the
    #: others are evicted rows the learner has not deleted yet; without a budget, all).
    max_features: int = 0
    features_evicted: int = 0
    features_held: int = 0
    #: An estimate of the features waiting for admission (bloom admission only, else None;
    #: :func:`~online_ctr.learning.admission.features_pending`).
    features_pending_admission: int | None = None
    #: The base-rate prior and its counts (:mod:`online_ctr.learning.base_rate`).
    base_rate: str = "off"
    base_clicks: float = 0.0
    base_examples: float = 0.0
    #: The predictions' importance-weighted sum and the labels', over every learned example
    #: (:data:`CALIBRATION_FIELDS`): their ratio is the model's calibration.
    predicted_sum: float = 0.0
    label_sum: float = 0.0
    #: The same over the recent window (:func:`~online_ctr.learning.stream_metrics.
    #: decayed_sums`).
    recent_predicted: float = 0.0
    recent_labels: float = 0.0

    @property
    def base_logit(self) -> float:
        """The offset the prior adds to the next prediction's logit (0.0 with ``off``)."""
        return BaseRate.parse(self.base_rate).logit(
            np.array([self.base_clicks, self.base_examples])
        )

    @property
    def calibration_ratio(self) -> float | None:
        """``sum(p) / sum(y)`` over every learned example (None before the first click)."""
        return self.predicted_sum / self.label_sum if self.label_sum else None

    @property
    def recent_calibration_ratio(self) -> float | None:
        """:attr:`calibration_ratio` over the recent window (None before a click in it)."""
        return self.recent_predicted / self.recent_labels if self.recent_labels else None

    @property
    def learned_weight(self) -> float:
        """The learned examples' total importance weight (``t`` when none had a weight)."""
        return self.t + self.weight_excess

    @property
    def progressive_logloss(self) -> float | None:
        """Mean progressive log loss so far, each example's weighted by its importance
        weight (``logloss_sum`` is the weighted sum); None before any example."""
        return self.logloss_sum / self.learned_weight if self.t else None


#: What a model created before a setting was stored has: numbers were raw, nothing calibrated.
_BEFORE_STORED = {
    "numeric": "raw",
    "calibration": "off",
    "encoding": "float64",
    "group": "",
    "admission": "all",
    "expire_after": "0",
    "max_features": "0",
    "base_rate": "off",
    "crosses": "",
}
#: The meta hash's fields of a feature budget's marks (:mod:`online_ctr.learning.eviction`),
#: and where each goes in :attr:`~online_ctr.learning.eviction.Evicting.marks`.
BUDGET_MARKS = ("budget_lowest", "held", "evicted", "cut_zero", "cut_all")
BUDGET_MARK_INDEX = (
    eviction.LOWEST,
    eviction.TRACKED,
    eviction.EVICTED,
    eviction.CUT_ZERO,
    eviction.CUT_ALL,
)
#: The meta hash's fields ``info`` reports.
_COUNTERS = ("t", "nnz_stable", "tracked", "logloss_sum")
#: The meta's fields of the admission filter's tally (finalize.lua writes them).
TALLY_FIELDS = ("counters_used", "admitted_recent")
#: The meta's fields of the predictions' and labels' weighted sums (finalize.lua adds to them),
#: and of the same over the recent window (finalize.lua writes them).
CALIBRATION_FIELDS = ("predicted_sum", "label_sum")
RECENT_FIELDS = ("recent_predicted", "recent_labels")
_INFO_FIELDS = (
    "rule", "params", "hash_bits", *_COUNTERS, "weight_excess", "expired", "evicted", "held",
    *TALLY_FIELDS, *BASE_FIELDS, *CALIBRATION_FIELDS, *RECENT_FIELDS, *_BEFORE_STORED,
)  # fmt: skip


class ModelStore:
    """Reads and writes one model; shared by the API and the worker."""

    def __init__(
        self,
        redis: RedisClient,
        spec: ModelSpec,
        replica_features: int = 0,
        copies: Budget | None = None,
        acks: ReplicaAcks | None = None,
        notices: ChangeNotices | None = None,
    ) -> None:
        """``replica_features``: serve from a copy of at most that many hot features
        (:mod:`online_ctr.store.replica`; 0, or on Redis Cluster: read every feature from the
        shards), counted against ``copies`` with other models' copies, and kept without a
        call while ``notices`` tell of no change. ``acks``: the learner's replica
        acknowledgements (:meth:`log_replicated`)."""
        # Any, not RedisClient, for the readers of ``store.redis`` outside the store: redis-py
        # types a reply as the union of every decoding, which they do not narrow yet.
        self.redis = redis
        self.spec = spec
        self.keys = ModelKeys(spec.name, spec.group)
        self.scripts = Scripts.register(redis)
        self.shards = StateShards(redis, self.keys, spec.layout, self.scripts)
        self.log = CommitLog(redis, self.keys, self.scripts)
        self.acks = acks or ReplicaAcks(redis)
        self.replica = None
        if replica_features and not self.shards.one_shard_per_call:
            self.replica = StateReplica(
                self.keys, spec.layout, self.scripts, replica_features, copies, notices, redis
            )

    async def ensure(self, create: bool = True) -> None:
        """Create the model (its meta hash) if new; refuse a different existing one. Without
        ``create``, a model that is not there is :class:`ModelGoneError` (it was deleted)."""
        described = self.spec.describe()
        stored = await self.redis.hgetall(self.keys.meta)
        if b"epoch" not in stored and b"importing" not in stored:
            if not create:
                raise ModelGoneError(f"model {self.spec.name!r} was deleted")
            # New (a lease taken on a deleted model may have left a fence counter alone).
            # Racing creators write the same description; the first epoch stays.
            await self._make_filters()
            # A dict[Any, Any]: redis-py's mapping is keyed by a union, and a Mapping's key
            # type is invariant, so dict[str, str] is refused though every str is allowed.
            await self.redis.hset(self.keys.meta, mapping=dict[Any, Any](described))
            await self.redis.hsetnx(self.keys.meta, "epoch", secrets.token_hex(8))
            stored = await self.redis.hgetall(self.keys.meta)
        if b"importing" in stored:
            # Checked after creating too: an import that claimed the name meanwhile rewrites
            # the whole meta when it finishes, and nobody uses the model until then.
            raise ModelImportingError(
                f"model {self.spec.name!r} is being imported from a snapshot; try again shortly"
            )
        stored_spec = dict(_BEFORE_STORED)  # overridden by what a newer version stored
        stored_spec |= {text(k): text(v) for k, v in stored.items() if text(k) in described}
        if stored_spec != described:
            raise ModelMismatchError(_mismatch(self.spec.name, stored_spec, described))

    async def _make_filters(self) -> None:
        """The new model's existence filters, unless this process's Redis user may not write
        state (the API's: :mod:`online_ctr.store.acl`): then its learner makes them
        (:meth:`~online_ctr.store.filter.ExistenceFilter.load_or_make`)."""
        try:
            await make_filters(self.redis, self.keys, self.spec.layout)
        except NoPermissionError:
            logger.info("model %r: its learner makes its filters", self.spec.name)

    async def weights(self, ids: NDArray[np.uint64]) -> Array:
        """The weights of ``ids`` as of now (0 for unknown features)."""
        return (await self.serving(ids)).weights

    async def serving(self, ids: NDArray[np.uint64], rates: bool = False) -> Serving:
        """What scoring ``ids`` needs, from one read: their weights, with ``rates`` their
        step sizes (for the uncertainty), and the calibration fit if the model has one."""
        rows: Fresh | StoredRows | None = None
        if self.replica is not None:
            rows = await self.replica.read(ids)
        if rows is None:
            rows = await self.shards.read(ids)
        spec = self.spec
        return Serving(
            weights=spec.weights(rows.state, rows.t, rows.cut_all),
            rates=spec.rates(rows.state, rows.t) if rates else None,
            fit=decode_fit(rows.calibration_fit) if spec.calibration == "power" else None,
            base_logit=spec.base_rate.logit(rows.base),  # (clicks, examples)
        )

    async def calibration_histogram(self) -> Histogram:
        """The histogram the stored calibration fit was fitted on (empty before any)."""
        raw = await self.redis.hget(self.keys.meta, HISTOGRAM_FIELD)
        return decode_histogram(cast(bytes | None, raw))  # responses are not decoded

    async def info(self) -> ModelInfo:
        """The model's description and counters, read in one round trip."""
        async with pipeline(self.redis) as pipe:
            pipe.hmget(self.keys.meta, *_INFO_FIELDS)  # not the histogram: bytes, 16.8 kB
            pipe.zcard(self.keys.expiry)
            pipe.xlen(self.keys.stream)
            pipe.xlen(self.keys.dead)
            raw, expiring, lag, dead = await pipe.execute()
        stored = {k: text(v) for k, v in zip(_INFO_FIELDS, raw, strict=True) if v is not None}
        meta = _BEFORE_STORED | stored
        tracked = int(meta.get("tracked", 0))
        return ModelInfo(
            name=self.spec.name,
            rule=meta.get("rule", self.spec.rule.name),
            params=json.loads(meta.get("params", "{}")),
            hash_bits=int(meta.get("hash_bits", 64)),
            t=int(meta.get("t", 0)),
            nonzero_weights=int(meta.get("nnz_stable", 0)) + int(expiring),
            features_tracked=tracked,
            logloss_sum=float(meta.get("logloss_sum", 0.0)),
            stream_lag=int(lag),
            dead_letters=int(dead),
            numeric=meta["numeric"],
            calibration=meta["calibration"],
            weight_excess=float(meta.get("weight_excess", 0.0)),
            admission=meta["admission"],
            expire_after=int(meta["expire_after"]),
            features_expired=int(meta.get("expired", 0)),
            max_features=int(meta["max_features"]),
            features_evicted=int(meta.get("evicted", 0)),
            features_held=int(meta.get("held", 0) if self.spec.max_features else tracked),
            features_pending_admission=self._pending(meta),
            base_rate=meta["base_rate"],
            base_clicks=_float(meta.get("base_clicks", "0")),
            base_examples=_float(meta.get("base_examples", "0")),
            predicted_sum=_float(meta.get("predicted_sum", "0")),
            label_sum=_float(meta.get("label_sum", "0")),
            recent_predicted=_float(meta.get("recent_predicted", "0")),
            recent_labels=_float(meta.get("recent_labels", "0")),
        )

    def _pending(self, meta: dict[str, str]) -> int | None:
        """The estimate of features waiting for admission, from the meta's tally (none
        before the first commit; None if it is not one finalize.lua writes)."""
        try:
            tally = Tally.parse(*(meta.get(field) for field in TALLY_FIELDS))
        except ValueError:
            return None
        t = int(meta.get("t", 0))
        return features_pending(tally, self.spec.admission, t)

    async def admission_counters(self) -> NDArray[np.uint8] | None:
        """The model's counting Bloom filter of feature admission as its commits left it
        (None: its rule counts nothing); a learner loads it when it takes the lease."""
        if not self.spec.admission.counted:
            return None
        stored = await self.redis.get(self.keys.admission)
        stored = stored.encode() if isinstance(stored, str) else stored or b""
        counters = np.zeros(COUNTERS, np.uint8)
        if len(stored) > COUNTERS:
            raise ModelDamagedError(
                f"model {self.spec.name!r}: its admission counters are {len(stored)} bytes, "
                f"more than {COUNTERS}"
            )
        counters[: len(stored)] = np.frombuffer(stored, np.uint8)
        return counters

    async def admission_tally(self, counters: NDArray[np.uint8]) -> Tally:
        """The tally of the model's admission filter ``counters`` (as
        :meth:`admission_counters` read them), with the admissions per period its commits
        left; unreadable ones (not finalize.lua's) are taken as none: they only feed an
        estimate, and the next commit writes them whole."""
        recent = await self.redis.hget(self.keys.meta, TALLY_FIELDS[1])
        try:
            return Tally.of(counters, parse_recent(None if recent is None else text(recent)))
        except ValueError:
            return Tally.of(counters)

    async def feature_budget(self) -> Evicting | None:
        """The model's feature budget as its commits left it (None: it has none); a learner
        loads it when it takes the lease. Counts that do not add up to the features held are
        :class:`ModelDamagedError`: learning on would evict the wrong features."""
        spec = self.spec
        if not spec.max_features:
            return None
        budget = eviction.feature_budget(spec.max_features)
        async with pipeline(self.redis) as pipe:
            pipe.get(self.keys.budget)
            pipe.hmget(self.keys.meta, *BUDGET_MARKS)
            stored, marks = await pipe.execute()
        stored = stored.encode() if isinstance(stored, str) else stored or b""
        name = f"model {spec.name!r}"
        if stored:
            if len(stored) != budget.counts.nbytes:
                raise ModelDamagedError(
                    f"{name}: its budget counts are {len(stored)} bytes, not {budget.counts.nbytes}"
                )
            budget.counts[:] = np.frombuffer(stored, "<i8").reshape(budget.counts.shape)
        for field, index, value in zip(BUDGET_MARKS, BUDGET_MARK_INDEX, marks, strict=True):
            mark = text(value or b"0")
            if not mark.isdigit() or not mark.isascii():
                raise ModelDamagedError(f"{name}: meta field {field} is not a whole number: {mark}")
            budget.marks[index] = int(mark)
        held = int(budget.counts[: eviction.STABLE].sum())
        if (budget.counts < 0).any() or held != budget.tracked():
            raise ModelDamagedError(
                f"{name}: its budget counts {held} features held, its meta {budget.tracked()}"
            )
        return budget

    async def base_counts(self) -> Array:
        """The base rate's counts ``(clicks, examples)`` as the model's commits left them
        (zeros before the first); a learner loads them when it takes the lease. Counts that
        are not finalize.lua's are :class:`ModelDamagedError`: every prediction adds them."""
        stored = await self.redis.hmget(self.keys.meta, *BASE_FIELDS)
        counts = [text(value or b"0") for value in stored]
        try:
            return np.array(check_state(*(float(count) for count in counts)))
        except ValueError:
            raise ModelDamagedError(
                f"model {self.spec.name!r}: meta fields base_clicks and base_examples are not "
                f"counts 0 <= clicks <= examples: {counts[0]} and {counts[1]}"
            ) from None

    async def recent_sums(self) -> Array:
        """The recent window's sums of predictions and labels as the commits left them
        (zeros before the first, or for a text that is not finalize.lua's: they only feed a
        metric, and the next commit writes them whole)."""
        stored = await self.redis.hmget(self.keys.meta, *RECENT_FIELDS)
        try:
            sums = np.array([float(text(value or b"0")) for value in stored])
        except ValueError:
            return np.zeros(2)
        return sums if np.isfinite(sums).all() and (sums >= 0).all() else np.zeros(2)

    async def cut_all(self) -> int:
        """The model's feature budget's cutoff of all features: a stored feature last touched
        at or before it is evicted (0: none, or no budget)."""
        return int(await self.redis.hget(self.keys.meta, "cut_all") or 0)

    async def version(self) -> tuple[int, str]:
        """The model's step and epoch (which changes if it is deleted and created again)."""
        t, epoch = await self.redis.hmget(self.keys.meta, "t", "epoch")
        raw = t or b"0"
        step = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        # As finalize.lua reads it (checks.lua's whole): digits only, no sign, spaces or '_'.
        if not (step.isascii() and step.isdigit()) or int(step) > 2**53:
            raise ModelDamagedError(f"meta field t is not a whole number: {step}")
        return int(step), text(epoch or b"")

    async def delete(self) -> int:
        """Delete every key of the model (its log side and every shard's keys, found with
        SCAN on every node); returns how many there were. A learner at work is fenced off by
        it and starts again on the new, empty model. A model of no group loses its
        Idempotency-Key records and their index too (a group's go with its last model)."""
        keys = list(self.keys.log_side())
        pattern = f"octr:{{{self.spec.name}/*}}:*"
        keys += [key async for key in self.redis.scan_iter(match=pattern, count=1000)]
        deleted = 0
        if self.keys.group is None:
            deleted = await idempotency.forget(self.redis, self.keys.feedback)
        for first in range(0, len(keys), 1000):
            # One key per UNLINK: on a cluster the keys of one call must share a slot. Queued
            # with execute_command: the cluster pipeline's unlink is a coroutine.
            async with pipeline(self.redis) as pipe:
                for key in keys[first : first + 1000]:
                    pipe.execute_command("UNLINK", key)
                deleted += sum(await pipe.execute())
        return deleted

    async def log_replicated(self) -> None:
        """Return once the log side's writes so far (commits finalized) are on its replicas,
        if replica acknowledgements are on: a commit is applied only then, so a failover
        never leaves the shards ahead of the log (:mod:`online_ctr.store.replication`)."""
        await self.acks.confirm(self.keys.meta, waited="log")

    async def shards_replicated(self, runs: Runs) -> None:
        """Return once the shards of ``runs`` have their writes so far on their replicas:
        only then does an apply count toward trimming the redo log."""
        keys = [self.keys.shard(shard).applied for shard, _ in runs]
        await self.acks.confirm(*keys, waited="shards")

    async def heartbeat(self, worker: str, forget_after_s: float | None = None) -> None:
        """Record that ``worker`` is alive, stamped with Redis's clock (one clock for all);
        with ``forget_after_s``, names silent for longer are dropped (dead workers' names
        would otherwise pile up, one per restart). The caller's own name is stamped first, so
        the newest heartbeat, which readiness reads, is never the one dropped."""
        seconds, micros = await self.redis.time()
        now = seconds + micros / 1e6
        async with pipeline(self.redis) as pipe:
            pipe.zadd(self.keys.workers, {worker: now})
            if forget_after_s is not None:
                pipe.zremrangebyscore(self.keys.workers, "-inf", f"({now - forget_after_s}")
            await pipe.execute()

    async def heartbeat_age(self) -> float | None:
        """Seconds since the freshest worker heartbeat, by Redis's clock; None if none ever."""
        seconds, micros = await self.redis.time()
        newest = await self.redis.zrange(self.keys.workers, -1, -1, withscores=True)
        if not newest:
            return None
        return float(seconds + micros / 1e6 - float(newest[0][1]))


def _mismatch(name: str, stored: dict[str, str], wanted: dict[str, str]) -> str:
    """Which settings differ from the stored model's, named as environment variables."""
    old, new = dict(stored), dict(wanted)
    for spec in (old, new):
        spec.update({k: str(v) for k, v in json.loads(spec.pop("params", "{}")).items()})
        spec.pop("fields", None)
    names = {"buckets": "state_buckets", "shards": "state_shards", "encoding": "state_encoding"}
    differ = ", ".join(
        f"OCTR_{names.get(key, key).upper()}={new.get(key, 'unset')} "
        f"(stored: {old.get(key, 'unset')})"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    )
    return (
        f"model {name!r} in Redis was created with other settings: {differ}; set them as "
        f"stored, use another OCTR_MODEL, or delete the model first "
        f"(`online-ctr models delete {name}`)"
    )


def spec_from_meta(name: str, meta: dict[str, str]) -> ModelSpec:
    """The spec of a model as its meta hash describes it (:meth:`ModelSpec.describe`)."""
    rule = get_rule(meta["rule"])
    bits = int(meta["hash_bits"])
    params = rule.params_type(**json.loads(meta["params"]))
    stored = _BEFORE_STORED | meta
    return ModelSpec(
        name,
        rule,
        params,
        None if bits == 64 else bits,
        int(meta["buckets"]),
        int(meta["shards"]),
        stored["encoding"],
        stored["numeric"],  # type: ignore[arg-type]
        stored["calibration"],  # type: ignore[arg-type]
        stored["group"] or None,
        Admission.parse(stored["admission"]),
        int(stored["expire_after"]),
        int(stored["max_features"]),
        BaseRate.parse(stored["base_rate"]),
        crosses=parse_crosses(stored["crosses"]),
    )


def _float(value: str) -> float:
    """A float of the meta as the API reports it: NaN for one that is not a number (the
    model is then damaged, which its learner reports; a report of it should not fail)."""
    try:
        return float(value)
    except ValueError:
        return math.nan


def spec_from(
    name: str,
    rule_name: str,
    params: Any,
    hash_bits: int | None,
    buckets: int,
    shards: int = 64,
    encoding: str = "float64",
    numeric: Numeric = "raw",
    calibration: Calibration = "off",
    group: str | None = None,
    admission: str = "all",
    expire_after: int = NEVER,
    max_features: int = UNBOUNDED,
    base_rate: str = MEAN.text,
    crosses: str = "",
) -> ModelSpec:
    """A :class:`ModelSpec` from plain settings values."""
    rule = get_rule(rule_name)
    return ModelSpec(
        name,
        rule,
        params,
        hash_bits,
        buckets,
        shards,
        encoding,
        numeric,
        calibration,
        group,
        Admission.parse(admission),
        expire_after,
        max_features,
        BaseRate.parse(base_rate),
        crosses=parse_crosses(crosses),
    )
