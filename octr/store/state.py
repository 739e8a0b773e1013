"""A model's state in Redis: reading it, and committing a batch atomically.

State lives in buckets (feature id modulo the bucket count), each one Redis string of
records sorted by id (:func:`~octr.store.codec.encode_buckets`). Every operation is a Lua
script registered once: ``read_state.lua`` and ``commit.lua`` for the worker, and
``lookup.lua``, which finds single rows inside their buckets, for serving. Reading returns
whole buckets together with the model's step ``t`` in one atomic call. Committing rewrites
the touched buckets only if ``t`` has not moved since that read (any other commit moves it),
and only if every stream entry of the batch is still pending for this consumer; it
acknowledges and deletes those entries in the same script. So concurrent workers never lose
each other's updates, and a batch is applied exactly once.

Whole buckets rather than a hash field per feature: the Lua work is then per bucket touched,
not per feature (profiled at ~2.5 us per feature field), and a bucket of a few dozen records
costs about as much memory per feature as a small hash would.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
import redis.asyncio as aioredis
from numpy.typing import NDArray

from octr.store import codec
from octr.store.keys import GROUP, ModelKeys
from online_ctr.features import Batch
from online_ctr.rules import Rule, get_rule
from online_ctr.rules.base import Array


class ModelMismatchError(RuntimeError):
    """The model in Redis was created with another rule, hyper-parameters or hashing."""


@dataclass(frozen=True)
class ModelSpec:
    """What a model is: its rule, hyper-parameters, feature hashing and state layout."""

    name: str
    rule: Rule
    params: Any
    hash_bits: int | None
    buckets: int

    def describe(self) -> dict[str, str]:
        """The spec as stored in the model's meta hash."""
        return {
            "rule": self.rule.name,
            "params": json.dumps(vars(self.params), sort_keys=True),
            "hash_bits": str(self.hash_bits or 64),
            "buckets": str(self.buckets),
            "fields": ",".join(self.rule.fields),
        }

    @property
    def width(self) -> int:
        """Values per stored state row: the rule's fields, then the occurrence count."""
        return len(self.rule.fields) + 1


@dataclass(frozen=True)
class Read:
    """Whole buckets as stored (their records: ids, rows of rule fields then count, bucket
    numbers), the step they are as of, and the model's epoch (which changes if the model is
    deleted and created again)."""

    t: int
    epoch: str
    buckets: NDArray[np.intp]
    ids: NDArray[np.uint64]
    rows: Array
    bucket_of: NDArray[np.intp]


@dataclass(frozen=True)
class Commit:
    """What the commit script answered: ``ok``, ``conflict`` or ``fenced``."""

    status: str
    t: int
    nonzero_weights: int = 0
    features_tracked: int = 0
    logloss_sum: float = 0.0


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _script(name: str) -> str:
    return resources.files("octr.store").joinpath(name).read_text()


class ModelStore:
    """Reads and writes one model's state; shared by the API and the worker."""

    def __init__(self, redis: aioredis.Redis, spec: ModelSpec) -> None:
        self.redis = redis
        self.spec = spec
        self.keys = ModelKeys(spec.name)
        self._read = redis.register_script(_script("read_state.lua"))
        self._commit = redis.register_script(_script("commit.lua"))
        self._lookup = redis.register_script(_script("lookup.lua"))

    async def ensure(self) -> None:
        """Create the model (meta and consumer group) if new; refuse a different existing one."""
        described = self.spec.describe()
        await self.redis.hsetnx(self.keys.meta, "rule", described["rule"])
        stored = await self.redis.hgetall(self.keys.meta)
        if len(stored) == 1:
            # Racing creators write the same description; the first epoch stays.
            await self.redis.hset(self.keys.meta, mapping=described)  # type: ignore[arg-type]
            await self.redis.hsetnx(self.keys.meta, "epoch", secrets.token_hex(8))
            stored = await self.redis.hgetall(self.keys.meta)
        stored_spec = {_text(k): _text(v) for k, v in stored.items() if _text(k) in described}
        if stored_spec != described:
            raise ModelMismatchError(
                f"model {self.spec.name!r} in Redis was created as {stored_spec}, but this "
                f"process is configured as {described}; use another model name or delete it"
            )
        try:
            await self.redis.xgroup_create(self.keys.stream, GROUP, id="0", mkstream=True)
        except aioredis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    def buckets_of(self, ids: NDArray[np.uint64]) -> NDArray[np.intp]:
        """The bucket each feature id lives in."""
        return (ids & np.uint64(self.spec.buckets - 1)).astype(np.intp)

    async def read(self, buckets: NDArray[np.intp]) -> Read:
        """Whole buckets (numbers, without repeats) and the model's version, atomically."""
        t, epoch, *values = await self._read(
            keys=[self.keys.meta],
            args=[buckets.astype("<u4").tobytes(), self.keys.bucket_prefix()],
        )
        ids, rows, bucket_of = codec.decode_buckets(values, buckets, self.spec.width)
        return Read(int(t), _text(epoch), buckets, ids, rows, bucket_of)

    async def weights(self, ids: NDArray[np.uint64]) -> Array:
        """The weights of ``ids`` as of now (0 for unknown features), found inside Redis so
        that only their rows travel."""
        buckets = self.buckets_of(ids)
        order = np.argsort(buckets, kind="stable")
        used, counts = np.unique(buckets[order], return_counts=True)
        t, _, blob = await self._lookup(
            keys=[self.keys.meta],
            args=[
                codec.pack_ids(ids[order]),
                np.column_stack((used, counts)).astype("<u4").tobytes(),
                8 * (self.spec.width + 1),
                self.keys.bucket_prefix(),
            ],
        )
        state = np.empty((len(ids), self.spec.width))
        state[order] = np.frombuffer(blob, "<f8").reshape(-1, self.spec.width)
        return self.spec.rule.weights(state[:, :-1], int(t), self.spec.params)

    async def info(self) -> ModelInfo:
        """The model's description and counters, read in one round trip."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self.keys.meta)
            pipe.zcard(self.keys.expiry)
            pipe.xlen(self.keys.stream)
            pipe.xlen(self.keys.dead)
            raw, expiring, lag, dead = await pipe.execute()
        meta = {_text(k): _text(v) for k, v in raw.items()}
        return ModelInfo(
            name=self.spec.name,
            rule=meta.get("rule", self.spec.rule.name),
            params=json.loads(meta.get("params", "{}")),
            hash_bits=int(meta.get("hash_bits", 64)),
            t=int(meta.get("t", 0)),
            nonzero_weights=int(meta.get("nnz_stable", 0)) + int(expiring),
            features_tracked=int(meta.get("tracked", 0)),
            logloss_sum=float(meta.get("logloss_sum", 0.0)),
            stream_lag=int(lag),
            dead_letters=int(dead),
        )

    async def heartbeat(self, consumer: str) -> None:
        """Record that ``consumer`` is alive, stamped with Redis's clock (one clock for all)."""
        seconds, micros = await self.redis.time()
        await self.redis.zadd(self.keys.workers, {consumer: seconds + micros / 1e6})

    async def heartbeat_age(self) -> float | None:
        """Seconds since the freshest worker heartbeat, by Redis's clock; None if none ever."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.zrange(self.keys.workers, -1, -1, withscores=True)
            (seconds, micros), newest = await pipe.execute()
        if not newest:
            return None
        return float(seconds + micros / 1e6 - newest[0][1])

    async def append(self, batch: Batch) -> str:
        """Append a labelled batch to the feedback stream as one entry; returns its id."""
        entry_id = await self.redis.xadd(self.keys.stream, {"b": codec.encode_entry(batch)})
        return _text(entry_id)

    async def commit(
        self, change: StateChange, consumer: str, entries: list[str], claims: str = ""
    ) -> Commit:
        """Run the commit script for a computed batch; ``claims`` is the model's claims
        counter from before the entries were taken ("" forces the per-entry owner check)."""
        reply = await self._commit(
            keys=[self.keys.meta, self.keys.stream, self.keys.expiry, self.keys.failures],
            args=[
                GROUP,
                consumer,
                change.t,
                change.epoch,
                change.examples,
                repr(change.logloss_sum),
                change.bucket_runs,
                change.bucket_values,
                codec.pack_ids(change.leaving),
                codec.pack_ids(change.entering),
                change.entering_steps.astype("<f8").tobytes(),
                change.stable_delta,
                change.tracked_delta,
                self.keys.bucket_prefix(),
                " ".join(entries),
                claims,
            ],
        )
        status = reply[0].decode()
        if status != "ok":
            return Commit(status=status, t=int(reply[1]) if status == "conflict" else -1)
        return Commit(status, int(reply[1]), int(reply[2]), int(reply[3]), float(reply[4]))


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

    @property
    def progressive_logloss(self) -> float | None:
        """Mean progressive log loss so far; None before any example."""
        return self.logloss_sum / self.t if self.t else None


@dataclass(frozen=True)
class StateChange:
    """A batch's effect on the state, computed against the state read at step ``t``."""

    t: int
    epoch: str
    examples: int
    logloss_sum: float
    bucket_runs: bytes
    bucket_values: bytes
    leaving: NDArray[np.uint64]
    entering: NDArray[np.uint64]
    entering_steps: Array
    stable_delta: int
    tracked_delta: int


def spec_from(
    name: str, rule_name: str, params: Any, hash_bits: int | None, buckets: int
) -> ModelSpec:
    """A :class:`ModelSpec` from plain settings values."""
    return ModelSpec(name, get_rule(rule_name), params, hash_bits, buckets)
