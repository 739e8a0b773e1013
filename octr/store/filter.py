"""The learner's copy of a model's existence filters: which features cannot be stored.

Every shard keeps a bitmap in which each stored feature's bit is set by the same script that
stores it (``apply.lua``; the bits are in :mod:`octr.store.layout`). A clear bit proves the
feature was never stored, so the learner takes it as new (zero state) without asking Redis;
a set bit may be another feature's, and that feature is read as before. The learner loads the
bitmaps when it takes the lease, after replaying the redo log, and sets the bits of its own
commits as it makes them: while it holds the lease nobody else stores a feature.

The filter is trusted only for a model created with it (its meta has ``filter``): a model
stored by an older version has features without bits.

>>> from octr.store.layout import Layout
>>> layout = Layout(buckets=1 << 4, shards=4, id_bits=64, width=2)
>>> known = ExistenceFilter(layout, [b""] * 4)
>>> ids = np.array([0x1234, 0x5678], np.uint64)
>>> known.maybe(ids).tolist()
[False, False]
>>> known.add(ids[:1])
>>> known.maybe(ids).tolist()
[True, False]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from octr.store.keys import ModelKeys
from octr.store.layout import Layout

#: The meta field that says the model's filters hold every stored feature.
FLAG = "filter"


class ExistenceFilter:
    """The bits of every shard's filter, one row of bytes per shard (Redis's bit order)."""

    def __init__(self, layout: Layout, bitmaps: list[bytes]) -> None:
        self.layout = layout
        self.bits = np.zeros((layout.shards, layout.filter_bytes), np.uint8)
        for shard, bitmap in enumerate(bitmaps):
            # A filter never written is no key (no bit set); Redis gives its bytes as stored.
            self.bits[shard, : len(bitmap)] = np.frombuffer(bitmap, np.uint8)

    @classmethod
    async def load(cls, redis: Any, keys: ModelKeys, layout: Layout) -> ExistenceFilter | None:
        """The model's filters as stored now; None if the model was not created with them."""
        if await redis.hget(keys.meta, FLAG) is None:
            return None
        async with redis.pipeline(transaction=False) as pipe:
            for shard in range(layout.shards):
                pipe.get(keys.shard(shard).filter)
            bitmaps = await pipe.execute()
        return cls(layout, [bitmap or b"" for bitmap in bitmaps])

    def _where(self, ids: NDArray[np.uint64]) -> tuple[NDArray[np.int64], ...]:
        at = self.layout.filter_of(ids)
        return at[:, 0], at[:, 1] >> 3, np.left_shift(1, 7 - (at[:, 1] & 7)).astype(np.uint8)

    def maybe(self, ids: NDArray[np.uint64]) -> NDArray[np.bool_]:
        """False where a feature is surely not stored."""
        shard, byte, mask = self._where(ids)
        found: NDArray[np.bool_] = (self.bits[shard, byte] & mask) > 0
        return found

    def add(self, ids: NDArray[np.uint64]) -> None:
        """Set the bits of features just committed (their apply sets them in Redis)."""
        shard, byte, mask = self._where(ids)
        np.bitwise_or.at(self.bits, (shard, byte), mask)
