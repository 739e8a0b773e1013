"""Reading a whole model's stored state, bucket by bucket, with bounded memory; and turning
stored bytes (bucket hash fields, redo records) back into feature ids and state rows.

A shard's buckets are read in order by ``scan.lua``, whole, about :data:`FIELDS_PER_CALL`
fields per call (one round trip per call rather than per bucket: a model has 2^18 buckets by
default, mostly small). A bucket too large to read in one go is paged with HSCAN, which may
return a field twice (while the hash is resized): its pages are merged by field, so each
feature comes out once, with the value read last. Memory holds one call's reply.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import numpy as np
from numpy.typing import NDArray

from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import DELETE, Array, Layout
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.scripts import Scripts

#: Fields read per call of ``scan.lua`` (about 0.5 MB of reply, a few ms of Redis time);
#: buckets larger than LARGEST_READ_WHOLE are paged with HSCAN, HSCAN_COUNT at a time.
FIELDS_PER_CALL = 20_000
LARGEST_READ_WHOLE = 4_096
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
    entry); a delete record's row is all zero, a feature not stored."""
    size = 4 + layout.field_bytes + layout.value_bytes
    raw = np.frombuffer(blob, np.uint8).reshape(-1, size)
    numbers = np.ascontiguousarray(raw[:, :4]).view("<u4").ravel()
    buckets = (numbers & np.uint32(DELETE - 1)).astype(np.uint64)  # without the flags
    fields = raw[:, 4 : 4 + layout.field_bytes].tobytes()
    return features(layout, buckets, fields, raw[:, 4 + layout.field_bytes :].tobytes())


async def _whole(redis: RedisClient, key: str) -> dict[bytes, bytes]:
    """A large bucket, page by page (HSCAN may repeat a field: the last value read stays)."""
    merged: dict[bytes, bytes] = {}
    cursor = None
    while cursor != 0:
        cursor, page = await redis.hscan(key, cursor or 0, count=HSCAN_COUNT)
        merged.update(cast(dict[bytes, bytes], page))
    return merged


async def _large(redis: RedisClient, layout: Layout, prefix: str, buckets: list[int]) -> Chunk:
    owners: list[int] = []
    fields: list[bytes] = []
    values: list[bytes] = []
    for bucket in buckets:
        page = await _whole(redis, f"{prefix}{bucket}")
        owners += [bucket] * len(page)
        fields += page.keys()
        values += page.values()
    return features(layout, np.array(owners, np.uint64), b"".join(fields), b"".join(values))


async def scan_state(
    redis: RedisClient,
    keys: ModelKeys,
    layout: Layout,
    scripts: Scripts,
    fields_per_call: int = FIELDS_PER_CALL,
    buckets_per_call: int | None = None,
) -> AsyncIterator[Chunk]:
    """Every stored feature of the model, in chunks of about ``fields_per_call``; with
    ``buckets_per_call``, no call looks at more buckets than that (empty ones cost Redis an
    HLEN each: a sparse model's shard is otherwise one long call)."""
    for shard in range(layout.shards):
        shard_keys = keys.shard(shard)
        bucket = shard
        while bucket >= 0:
            end = layout.buckets
            if buckets_per_call is not None:  # the shard's buckets are shard + k * shards
                end = min(end, bucket + layout.shards * buckets_per_call)
            reply = await scripts.scan(
                keys=[shard_keys.route],
                args=[shard_keys.bucket_prefix, bucket, layout.shards, end, fields_per_call,
                      LARGEST_READ_WHOLE],
            )  # fmt: skip
            bucket, fields, values, counts, large = reply
            bucket = int(bucket)
            if bucket < 0 and end < layout.buckets:  # this call's buckets done, not the shard's
                bucket = end
            if counts:
                read = np.frombuffer(counts, "<u4").reshape(-1, 2).astype(np.uint64)
                owners = np.repeat(read[:, 0], read[:, 1].astype(np.intp))
                yield features(layout, owners, fields, values)
            if large:
                numbers = [int(b) for b in large.split()]
                yield await _large(redis, layout, shard_keys.bucket_prefix, numbers)
