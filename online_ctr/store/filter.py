"""The learner's copy of a model's existence filters: which features cannot be stored.

Every shard keeps a bitmap in which each stored feature's bit is set by the same script that
stores it (``apply.lua``; the bits are in :mod:`online_ctr.store.layout`). A clear bit proves the
feature was never stored, so the learner takes it as new (zero state) without asking Redis;
a set bit may be another feature's, and that feature is read as before. The learner loads the
bitmaps when it takes the lease, after replaying the redo log, and sets the bits of its own
commits as it makes them: while it holds the lease nobody else stores a feature.

A shard's filter is made, at its full length, when the model is created or imported
(:func:`make_filters`), and ``apply.lua`` never makes one. A model created by a process whose
Redis user may not write state (the API's: :mod:`online_ctr.store.acl`) has none at first:
its learner makes them when it takes the lease, if the model never committed
(:meth:`ExistenceFilter.load_or_make`). So a shard
without its filter (a model stored by an older version, or a filter deleted with its model
while a learner made the model again) is not trusted, and its features are read as before.

Where a feature's bit goes follows from its filter's length
(:func:`online_ctr.store.layout.filter_spread`): the learner takes the length most of the model's
filters have (a model made before filters grew to 24 bytes per bucket keeps its shorter ones),
and ``apply.lua`` reads each filter's length as it sets bits. A shard whose filter has another
length is not trusted.

>>> from online_ctr.store.layout import Layout
>>> layout = Layout(buckets=1 << 4, shards=4, id_bits=64, width=2)
>>> empty = bytes(layout.filter_bytes)
>>> known = ExistenceFilter(layout, [empty, empty, empty, None])
>>> ids = np.array([0x1234, 0x5678, 0x567B], np.uint64)
>>> known.maybe(ids).tolist()
[False, False, True]
>>> known.add(ids[:1])
>>> known.maybe(ids).tolist()
[True, False, True]
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from numpy.typing import NDArray

from online_ctr.store.failures import pipeline
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Layout
from online_ctr.store.redis_types import RedisClient


async def make_filters(redis: RedisClient, keys: ModelKeys, layout: Layout, drop: int = 0) -> None:
    """Every shard's filter at its full length, before the model holds any feature; first,
    with ``drop``, the filters of that many shards are deleted (an old model's, any layout).
    Redis makes a new string exactly as long as asked; SETRANGE leaves an existing one's bits
    alone (they can only make a feature be read that need not be)."""
    async with pipeline(redis) as pipe:
        for shard in range(drop):
            pipe.execute_command("UNLINK", keys.shard(shard).filter)  # see ModelStore.delete
        for shard in range(layout.shards):
            pipe.setrange(keys.shard(shard).filter, layout.filter_bytes - 1, b"\0")
        await pipe.execute()


class ExistenceFilter:
    """The bits of every shard's filter, one row of bytes per shard (Redis's bit order), and
    which shards have one of the length the model's filters have."""

    def __init__(self, layout: Layout, bitmaps: list[bytes | None]) -> None:
        self.layout = layout
        lengths = Counter(len(bitmap) for bitmap in bitmaps if bitmap)
        #: The length most of the model's filters have (the longer of two as common); a new
        #: filter's if none is there.
        self.filter_bytes = max(lengths, key=lambda n: (lengths[n], n), default=layout.filter_bytes)
        self.bits = np.zeros((layout.shards, self.filter_bytes), np.uint8)
        self.trusted = np.array(
            [bitmap is not None and len(bitmap) == self.filter_bytes for bitmap in bitmaps],
            np.bool_,
        )
        for shard in np.flatnonzero(self.trusted).tolist():
            self.bits[shard] = np.frombuffer(bitmaps[shard] or b"", np.uint8)

    @classmethod
    async def load(cls, redis: RedisClient, keys: ModelKeys, layout: Layout) -> ExistenceFilter:
        """The model's filters as stored now (one GET per shard, in one pipeline)."""
        async with pipeline(redis) as pipe:
            for shard in range(layout.shards):
                pipe.get(keys.shard(shard).filter)
            return cls(layout, await pipe.execute())

    @classmethod
    async def load_or_make(
        cls, redis: RedisClient, keys: ModelKeys, layout: Layout
    ) -> ExistenceFilter:
        """The filters, for the learner that holds the model's lease: made first if no shard
        has one and the model never committed (nothing is stored, and nobody else writes the
        shards while the lease is held); a model stored without them stays so."""
        known = await cls.load(redis, keys, layout)
        if known.trusted.any() or int(await redis.hget(keys.meta, "seq") or 0):
            return known
        async with pipeline(redis) as pipe:
            for shard in range(layout.shards):
                pipe.strlen(keys.shard(shard).filter)
            if any(await pipe.execute()):  # some of another length: not made by us
                return known
        await make_filters(redis, keys, layout)
        return await cls.load(redis, keys, layout)

    def _where(self, ids: NDArray[np.uint64]) -> tuple[NDArray[np.int64], ...]:
        at = self.layout.filter_of(ids, self.filter_bytes)
        return at[:, 0], at[:, 1] >> 3, np.left_shift(1, 7 - (at[:, 1] & 7)).astype(np.uint8)

    def maybe(self, ids: NDArray[np.uint64]) -> NDArray[np.bool_]:
        """False where a feature is surely not stored."""
        shard, byte, mask = self._where(ids)
        found: NDArray[np.bool_] = ((self.bits[shard, byte] & mask) > 0) | ~self.trusted[shard]
        return found

    def add(self, ids: NDArray[np.uint64]) -> None:
        """Set the bits of features just committed (their apply sets them in Redis)."""
        shard, byte, mask = self._where(ids)
        np.bitwise_or.at(self.bits, (shard, byte), mask)
