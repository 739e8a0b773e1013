"""Reading and writing features' state in the shards: cost per touched feature.

On Redis Cluster each call of ``read.lua`` or ``apply.lua`` names the one shard (one slot) it
touches in KEYS, and the calls for a batch go out in one pipeline that redis-py splits by
node. On a single Redis one call covers every shard: ``apply.lua`` still names them (it marks
each applied), ``read.lua`` takes its records flat, each with its shard's number.

The calls are raw EVALSHA in a pipeline: redis-py's cluster pipelines refuse script objects
and never load a missing script (docs/redis-cluster.md), and its plain pipelines spend a round
trip on SCRIPT EXISTS before each execute. A call that answers NOSCRIPT (a promoted replica, a
flushed script cache, a fresh server) runs again through its script object, which loads it.
Reads are pure and applies idempotent, so a repeated call is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from online_ctr.store.calibration_codec import FIT_FIELD
from online_ctr.store.failures import pipeline
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Array, Layout
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.scripts import Scripts

#: Per shard: its number and its records.
Runs = list[tuple[int, bytes]]

#: A script call's KEYS and the arguments after its head.
Call = tuple[list[str], list[Any]]
#: Records per script call on a single Redis, in bytes: 32 KiB is about 1,000 write records,
#: about 2 ms of Redis time (loadtests/costs/learning_redis_cost.py), which is as long as an
#: API's append behind it waits. At 128 KiB, learning through /learn one body at a time was
#: about a fifth slower (the same measurement, alternated).
CALL_BYTES = 1 << 15


#: The meta's fields of the base rate's counts (finalize.lua writes them).
BASE_FIELDS = ("base_clicks", "base_examples")


@dataclass(frozen=True)
class StoredRows:
    """Features' state as stored: one row per id (zeros if never stored), which are stored,
    and the model's step ``t`` and calibration fit (its stored text, None if none) read in
    the same command of the same round trip (the state is at least as new)."""

    state: Array
    stored: NDArray[np.bool_]
    t: int
    calibration_fit: bytes | None = None
    #: A feature budget's cutoff of all features (:mod:`online_ctr.learning.eviction`).
    cut_all: int = 0
    #: The base rate's counts (:mod:`online_ctr.learning.base_rate`), read with ``t``.
    base: tuple[float, float] = (0.0, 0.0)


def stamp(seq: int, gen: int) -> str:
    """A commit's stamp as ``apply.lua`` takes it and writes it in a shard's ``applied``: its
    number, and its log generation unless 0 (what every stamp was before generations).

    A shard skips a commit whose stamp is not after its own: same generation and a number not
    above its own, or an earlier generation (a stale learner's). The generation moves on when
    the log side is found to have gone back (:mod:`workers.rollback`), so that commits reusing
    numbers the shards have are applied.

    >>> stamp(548, 0), stamp(548, 2), parse_stamp(b"548 2"), parse_stamp(None)
    ('548', '548 2', (548, 2), (0, 0))
    """
    return str(seq) if gen == 0 else f"{seq} {gen}"


def parse_stamp(raw: bytes | str | None) -> tuple[int, int]:
    """A shard's ``applied`` as (commit number, generation); (0, 0) if it has none. A value
    that is not a stamp raises ``ValueError`` (``apply.lua`` refuses it too)."""
    if raw is None:
        return 0, 0
    value = raw.decode() if isinstance(raw, bytes) else raw
    seq, space, gen = value.partition(" ")
    if not (value.isascii() and seq.isdigit() and (gen.isdigit() or not space)):
        raise ValueError(f"not a commit stamp: {value!r}")
    return int(seq), int(gen or 0)


class StateShards:
    """The state shards of one model."""

    def __init__(
        self, redis: RedisClient, keys: ModelKeys, layout: Layout, scripts: Scripts
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.layout = layout
        self.scripts = scripts
        self.one_shard_per_call = isinstance(redis, RedisCluster)
        # Key names per shard, made once: a pass names up to every shard, in every call.
        shards = [keys.shard(index) for index in range(layout.shards)]
        self._applied = [shard.applied for shard in shards]
        self._routes = [shard.route for shard in shards]
        self._prefixes = [shard.bucket_prefix for shard in shards]
        self._filters = [shard.filter for shard in shards]

    def _calls(self, runs: Runs) -> list[Runs]:
        """Shards grouped into script calls: one each on a cluster; else whole shards up to
        about :data:`CALL_BYTES` of records a call, so that no call keeps Redis busy long
        (requests of other clients run between the calls of a pipeline). A shard is never
        split: ``apply.lua`` marks it applied once it has all of the commit's records."""
        if self.one_shard_per_call:
            return [[run] for run in runs]
        calls: list[Runs] = []
        size = CALL_BYTES
        for run in runs:
            if size + len(run[1]) > CALL_BYTES:
                calls.append([])
                size = 0
            calls[-1].append(run)
            size += len(run[1])
        return calls

    def _keys_args(self, runs: Runs) -> Call:
        keys, args = [], []
        for shard, blob in runs:
            keys.append(self._applied[shard])
            args += [self._prefixes[shard], blob, self._filters[shard]]
        return keys, args

    async def _run(
        self, script: Any, head: list[Any], called: list[Call], step: bool = False
    ) -> list[Any]:
        """One script call per group of shards, in one pipeline of raw EVALSHAs; with
        ``step``, the model's step, calibration fit and budget cutoff first (one HMGET).

        Raw, not through the script objects: redis-py's pipeline then asks SCRIPT EXISTS in
        a round trip of its own before every execute, which doubled the round trips of a
        single ``/predict``. A call that answers NOSCRIPT runs again through its script
        object, which loads it."""
        async with pipeline(self.redis) as pipe:  # a failure refreshes a cluster's slot map
            if step:
                pipe.hmget(self.keys.meta, "t", FIT_FIELD, "cut_all", *BASE_FIELDS)
            for keys, args in called:
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *head, *args)
            replies = list(await pipe.execute(raise_on_error=False))
            for reply in replies:
                if isinstance(reply, Exception) and not isinstance(reply, NoScriptError):
                    raise reply
        offset = int(step)
        for index, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                keys, args = called[index - offset]
                replies[index] = await script(keys=keys, args=head + args)
        return replies

    async def call_each(self, script: Any, called: list[Call]) -> list[Any]:
        """``script`` once per (KEYS, ARGV) of ``called``, in one pipeline (:meth:`_run`)."""
        return await self._run(script, [], called)

    async def read(self, ids: NDArray[np.uint64]) -> StoredRows:
        """The stored state of ``ids``."""
        layout = self.layout
        called, order = self._read_calls(ids)
        head = [layout.field_bytes, layout.value_bytes, *self.keys.bucket_prefix_parts]
        (t, fit, cut, *base), *replies = await self._run(self.scripts.read, head, called, step=True)
        values = layout.values(b"".join(reply[0] for reply in replies), len(ids))
        flags = np.frombuffer(b"".join(reply[1] for reply in replies), np.bool_)
        if order is None:
            state, stored = values.copy(), flags.copy()
        else:
            state, stored = np.empty_like(values), np.empty_like(flags)
            state[order], stored[order] = values, flags
        clicks, examples = (float(count or 0) for count in base)
        return StoredRows(state, stored, int(t or 0), fit, int(cut or 0), (clicks, examples))

    def _read_calls(self, ids: NDArray[np.uint64]) -> tuple[list[Call], NDArray[np.intp] | None]:
        """The read script's calls for ``ids``, and the order their replies come in (None:
        that of ``ids``). On a single Redis the records go as they are, cut every
        :data:`CALL_BYTES`; on a cluster, one call per shard."""
        records = self.layout.reads(ids)
        if not self.one_shard_per_call:
            step = max(1, CALL_BYTES // records.shape[1])
            return [([], [records[i : i + step].tobytes()]) for i in range(0, len(ids), step)], None
        shards = self.layout.shard_of(ids)
        order = np.argsort(shards, kind="stable")
        bounds = np.searchsorted(shards[order], np.arange(self.layout.shards + 1))
        called: list[Call] = [
            ([self._routes[shard]], [records[order[bounds[shard] : bounds[shard + 1]]].tobytes()])
            for shard in np.flatnonzero(np.diff(bounds)).tolist()
        ]
        return called, order

    async def apply(self, seq: int, runs: Runs, gen: int = 0) -> None:
        """Apply commit ``seq`` of log generation ``gen``'s records to their shards (a no-op
        where already applied: see :func:`stamp`)."""
        layout = self.layout
        within = layout.buckets // layout.shards
        head = [stamp(seq, gen), layout.field_bytes, layout.value_bytes, layout.shards, within]
        await self._run(self.scripts.apply, head, [self._keys_args(c) for c in self._calls(runs)])
