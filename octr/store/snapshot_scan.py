"""Reading a whole model's stored state, bucket by bucket, with bounded memory; and turning
stored bytes (bucket hash fields, redo records) back into feature ids and state rows.

The buckets of one shard are read a group at a time, with one pipelined HSCAN each: a small
bucket hash (Redis keeps it as a listpack) comes back whole from the first call, a large one
page by page. HSCAN may return a field twice (while the hash is resized); a bucket's pages
are merged by field, so each feature comes out once, with the value read last.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from octr.store.keys import ModelKeys
from octr.store.layout import Array, Layout

#: Buckets read per pipeline, and fields asked for per HSCAN call of a large bucket.
BUCKETS_PER_CALL = 256
HSCAN_COUNT = 1000

Chunk = tuple[NDArray[np.uint64], Array]


def features(layout: Layout, buckets: NDArray[np.uint64], fields: bytes, values: bytes) -> Chunk:
    """Ids and state rows of stored features: each one's bucket, field name (the id's high
    bits, ``layout.field_bytes`` each, back to back) and value (back to back)."""
    count = len(buckets)
    raw = np.frombuffer(fields, np.uint8).reshape(count, layout.field_bytes)
    padded = np.zeros((count, 8), np.uint8)
    padded[:, : layout.field_bytes] = raw
    high = padded.view("<u8").ravel().astype(np.uint64)
    ids = (high << np.uint64(layout.bucket_bits)) | buckets.astype(np.uint64)
    return ids, layout.values(values, count)


def records(layout: Layout, blob: bytes) -> Chunk:
    """Ids and state rows of write records (``u32 bucket | field | value``, as in a redo
    entry)."""
    size = 4 + layout.field_bytes + layout.value_bytes
    raw = np.frombuffer(blob, np.uint8).reshape(-1, size)
    buckets = np.ascontiguousarray(raw[:, :4]).view("<u4").ravel().astype(np.uint64)
    fields = raw[:, 4 : 4 + layout.field_bytes].tobytes()
    return features(layout, buckets, fields, raw[:, 4 + layout.field_bytes :].tobytes())


async def _whole(redis: Any, key: str, cursor: int, page: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """A large bucket's remaining pages, merged into its first."""
    merged = dict(page)
    while cursor:
        cursor, more = await redis.hscan(key, cursor, count=HSCAN_COUNT)
        merged.update(more)
    return merged


async def scan_state(redis: Any, keys: ModelKeys, layout: Layout) -> AsyncIterator[Chunk]:
    """Every stored feature of the model, in chunks of at most a group of buckets."""
    for shard in range(layout.shards):
        prefix = keys.shard(shard).bucket_prefix
        buckets = range(shard, layout.buckets, layout.shards)
        for first in range(0, len(buckets), BUCKETS_PER_CALL):
            group = buckets[first : first + BUCKETS_PER_CALL]
            async with redis.pipeline(transaction=False) as pipe:
                for bucket in group:
                    pipe.hscan(f"{prefix}{bucket}", 0, count=HSCAN_COUNT)
                replies = await pipe.execute()
            owners: list[int] = []
            fields: list[bytes] = []
            values: list[bytes] = []
            for bucket, (cursor, page) in zip(group, replies, strict=True):
                if cursor:
                    page = await _whole(redis, f"{prefix}{bucket}", cursor, page)
                owners += [bucket] * len(page)
                fields += page.keys()
                values += page.values()
            if owners:
                numbers = np.array(owners, np.uint64)
                yield features(layout, numbers, b"".join(fields), b"".join(values))
