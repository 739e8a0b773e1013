"""Where each feature's state lives and how its bytes look: pure numpy, no Redis.

A feature id's low ``log2(buckets)`` bits pick its bucket, the bucket's low ``log2(shards)``
bits its shard, and the rest of the id, ``field_bytes`` little-endian bytes, names its field in
the bucket's hash. Dropping the bucket bits from the field keeps every stored byte useful:
at 2^18 buckets a 64-bit id needs 6 bytes of field. The value is the rule's state fields as
little-endian float64, exactly what the learner computed; or, with the compact encoding
(:mod:`online_ctr.learning.compact`), 4 bytes: the weight-bearing value's q2.13 code (``<i2``), then
``n``'s code (``<u2``), which the learner already rounded its state to, so they are exact too.

In a listpack-encoded hash an entry costs its bytes plus about 2, and a bucket stays a
listpack while it has at most ``hash-max-listpack-entries`` (128) fields and no value over
``hash-max-listpack-value`` (64) bytes: so a feature costs a field of ``field_bytes + 2``, a
value of ``value_bytes + 2`` and its share of the bucket key's overhead. Listpack's integer
encodings would save nothing here: a 24-bit integer takes 5 bytes, as a 3-byte string does.

A *record* as the Lua scripts take it is ``u16 shard | u32 bucket | field`` (reads, in any
order) or ``u32 bucket | field | value`` (writes, grouped by shard and sorted by bucket within
one). A write record has :data:`NEW` set in its bucket number where the feature's filter bit
(below) is to be set: a feature not stored before, unless an earlier commit set its bit.

Each shard also has an *existence filter*: a bitmap in which every stored feature has its bit
set (one bit per feature: a Bloom filter with one hash), so that the learner reads from Redis
only the new features whose bit is set (about one in five at 10M features with 2^18 buckets)
instead of every one, each a walk through memory that misses the CPU's caches. Its bit is
taken from the id's bits above the shard's: the bucket within the shard, then the field's
first byte, modulo the filter's bits. A new filter is ``filter_bytes``: 24 bytes per bucket
less 16 per shard, so that Redis's string and its header fit exactly in one of the
allocator's size classes (0.63 bytes per feature at 10M features with the default layout,
which keeps the state and its filters within 32 bytes a feature there). Filters made before
were 16 bytes per bucket and used 7 bits of the field (a quarter of the new features were
read at 10M): where a bit goes follows from the filter's length (:func:`filter_spread`), so
they keep working.

>>> layout = Layout(buckets=1 << 4, shards=4, id_bits=64, width=2)
>>> ids = np.array([0x1234, 0xFFFF_FFFF_FFFF_FFF1], np.uint64)
>>> layout.shard_of(ids).tolist(), layout.bucket_of(ids).tolist(), layout.field_bytes
([0, 1], [4, 1], 8)
>>> runs = layout.records(ids, np.array([[1.0, 2.0], [3.0, 4.0]]))
>>> [(shard, len(blob)) for shard, blob in runs]
[(0, 28), (1, 28)]
>>> layout.filter_bytes, layout.filter_of(ids).tolist()
(80, [[0, 141], [1, 380]])
>>> compact = Layout(1 << 4, 4, 64, 2, CompactCodec("ftrl", alpha=0.1, beta=1.0))
>>> compact.value_bytes, compact.values(compact.records(ids[:1], np.zeros((1, 2)))[0][1][12:], 1)
(4, array([[0., 0.]]))
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.compact import CompactCodec

Array = NDArray[np.float64]

#: Set in a write record's bucket number when the apply script must set the feature's filter
#: bit: a feature not stored before, unless an earlier commit set that bit (another
#: feature's). Buckets are below 2^24, far from it.
NEW = 1 << 31
#: Set in a write record's bucket number where the feature is to be deleted (its feature
#: expired: :mod:`online_ctr.learning.retention`); its value is all zero bytes, what a reader
#: of records that ignores the flag takes for a feature not stored.
DELETE = 1 << 30


def filter_spread(filter_bits: int, within: int) -> int:
    """How many values of a field's first byte a filter of ``filter_bits`` spreads each
    bucket's features over (``within`` buckets per shard): as many as it has bits per bucket
    (192 for a filter of 24 bytes per bucket), at most 256; but 128 for a filter of at most
    128 bits per bucket (16 bytes, made before), as then."""
    return min(256, -(-filter_bits // within)) if filter_bits > 128 * within else 128


@dataclass(frozen=True)
class Layout:
    """The state layout of a model: bucket and shard counts (powers of two), the bits of a
    feature id, the state values per feature, and the compact codec if the model uses it
    (else the values are float64)."""

    buckets: int
    shards: int
    id_bits: int
    width: int
    compact: CompactCodec | None = None

    def __post_init__(self) -> None:
        for name, value in (("buckets", self.buckets), ("shards", self.shards)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, got {value}")
        if self.shards > self.buckets:
            raise ValueError(f"shards ({self.shards}) cannot exceed buckets ({self.buckets})")

    @property
    def bucket_bits(self) -> int:
        return self.buckets.bit_length() - 1

    @property
    def field_bytes(self) -> int:
        """Bytes of a field name: the id's bits above the bucket bits (at least one byte)."""
        return max(1, -(-(self.id_bits - self.bucket_bits) // 8))

    @property
    def value_bytes(self) -> int:
        return 4 if self.compact else 8 * self.width

    @property
    def filter_bytes(self) -> int:
        """Bytes of a new shard's existence filter: 24 a bucket, less 16 for Redis's string
        header and terminator (so the allocation is exactly 3 * 2^k bytes, one of jemalloc's
        size classes), at least 16."""
        return max(16, 24 * (self.buckets // self.shards) - 16)

    def filter_of(
        self, ids: NDArray[np.uint64], filter_bytes: int | None = None
    ) -> NDArray[np.int64]:
        """Each id's shard and bit in the shard's filter of ``filter_bytes`` (by default a
        new one's), in ``SETBIT`` numbering, one row each.

        The bit is ``(b + 2^w * (f mod s)) mod (8 * filter_bytes)``, with ``b`` the bucket
        within the shard (``w`` bits), ``f`` the field's first byte and ``s`` the filter's
        :func:`filter_spread`: ``apply.lua`` computes the same from a record and the
        filter's length."""
        within = self.buckets // self.shards
        filter_bits = 8 * (self.filter_bytes if filter_bytes is None else filter_bytes)
        spread = filter_spread(filter_bits, within)
        bucket = (ids >> np.uint64(self.shards.bit_length() - 1)) & np.uint64(within - 1)
        low = ((ids >> np.uint64(self.bucket_bits)) & np.uint64(255)) % np.uint64(spread)
        bit = (bucket + low * np.uint64(within)) % np.uint64(filter_bits)
        return np.column_stack([self.shard_of(ids), bit.astype(np.intp)]).astype(np.int64)

    def bucket_of(self, ids: NDArray[np.uint64]) -> NDArray[np.uint32]:
        return (ids & np.uint64(self.buckets - 1)).astype(np.uint32)

    def shard_of(self, ids: NDArray[np.uint64]) -> NDArray[np.intp]:
        return (ids & np.uint64(self.shards - 1)).astype(np.intp)

    def _fields(self, ids: NDArray[np.uint64]) -> NDArray[np.uint8]:
        """Each id's field name as a row of ``field_bytes`` bytes."""
        high = (ids >> np.uint64(self.bucket_bits)).astype("<u8")
        return high.view(np.uint8).reshape(-1, 8)[:, : self.field_bytes]

    def _runs(
        self,
        ids: NDArray[np.uint64],
        values: list[NDArray[np.uint8]],
        new: NDArray[np.bool_] | None = None,
        deleted: NDArray[np.bool_] | None = None,
    ) -> Iterator[tuple[int, bytes, NDArray[np.intp]]]:
        """Per shard used: its number, its records (bucket, with :data:`NEW` where ``new``
        and :data:`DELETE` where ``deleted``, field, then ``values`` side by side) and which
        of ``ids`` they are, grouped by shard then bucket."""
        if not len(ids):
            return
        buckets = self.bucket_of(ids)
        shards = (buckets & np.uint32(self.shards - 1)).astype(np.uint64)
        # One sort key, the shard above the bucket: one argsort instead of a two-key lexsort.
        order = np.argsort((shards << np.uint64(self.bucket_bits)) | buckets)
        bounds = np.searchsorted(shards[order], np.arange(self.shards + 1, dtype=np.uint64))
        flags = np.uint32(NEW) * (np.ones(len(ids), np.uint32) if new is None else new)
        if deleted is not None:
            flags = flags | np.uint32(DELETE) * deleted.astype(np.uint32)
        numbers = (buckets | flags.astype(np.uint32)).astype("<u4")
        columns = [numbers.view(np.uint8).reshape(-1, 4), self._fields(ids)]
        table = np.hstack([c[order] for c in [*columns, *values]])
        for shard in np.flatnonzero(np.diff(bounds)):
            first, last = bounds[shard], bounds[shard + 1]
            yield int(shard), table[first:last].tobytes(), order[first:last]

    def reads(self, ids: NDArray[np.uint64]) -> NDArray[np.uint8]:
        """The read record of each id, one row per id, in the order of ``ids``."""
        buckets = self.bucket_of(ids)
        shards = (buckets & np.uint32(self.shards - 1)).astype("<u2")
        return np.hstack(
            [
                shards.view(np.uint8).reshape(-1, 2),
                buckets.astype("<u4").view(np.uint8).reshape(-1, 4),
                self._fields(ids),
            ]
        )

    def records(
        self,
        ids: NDArray[np.uint64],
        state: Array,
        new: NDArray[np.bool_] | None = None,
        deleted: NDArray[np.bool_] | None = None,
    ) -> list[tuple[int, bytes]]:
        """Write records per shard for ``ids`` and their ``state`` rows; ``new`` says which
        were not stored before (None: any may be new, as for an import), ``deleted`` which
        are to be deleted (their values then all zero bytes, whatever their rows)."""
        if deleted is not None and deleted.any():
            state = np.where(deleted[:, None], 0.0, state)
        values = self.encode(state)
        return [(s, blob) for s, blob, _ in self._runs(ids, [values], new, deleted)]

    def encode(self, state: Array) -> NDArray[np.uint8]:
        """Each state row as its ``value_bytes`` bytes."""
        if self.compact is None:
            return np.ascontiguousarray(state, dtype="<f8").view(np.uint8)
        weights, n = self.compact.codes(np.asarray(state, np.float64).reshape(-1, 2))
        codes = np.empty((len(n), 2), "<u2")
        codes[:, 0] = weights.astype("<i2").view("<u2")
        codes[:, 1] = n
        return codes.view(np.uint8)

    def values(self, blob: bytes, count: int) -> Array:
        """State rows from ``count`` values back to back (as the read script returns them)."""
        if self.compact is None:
            return np.frombuffer(blob, "<f8", count * self.width).reshape(count, self.width)
        codes = np.frombuffer(blob, "<u2", count * 2).reshape(count, 2)
        return self.compact.state(codes[:, 0].view("<i2").astype(np.int64), codes[:, 1])
