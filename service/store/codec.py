"""Byte encodings: feedback stream entries, and per-feature state values.

A stream entry holds one ``/learn`` request: its examples as a CSR batch of hashed ids, so the
worker never parses JSON or hashes strings. Layout (little endian)::

    u8 version=1 | u32 n | u32 nnz | u8 has_values | u8 labels[n] | u32 indptr[n+1]
    | u64 ids[nnz] | f64 values[nnz] (only if has_values; otherwise every value is 1)

A state value is the feature's rule fields then its occurrence count, as float64.

>>> from online_ctr.features import FeatureHasher
>>> batch = FeatureHasher().batch([{"a": "x", "n": 2.0}], labels=[1])
>>> decoded = decode_entry(encode_entry(batch))
>>> decoded.ids.tolist() == batch.ids.tolist(), decoded.values.tolist(), decoded.labels.tolist()
(True, [1.0, 1.0, 2.0], [1.0])
"""

from __future__ import annotations

import struct

import numpy as np
from numpy.typing import NDArray

from online_ctr.features import Batch

VERSION = 1
_HEADER = struct.Struct("<BIIB")


class EntryError(ValueError):
    """A stream entry that cannot be decoded."""


def encode_entry(batch: Batch) -> bytes:
    """One stream entry for a labelled batch."""
    n, nnz = len(batch), batch.occurrences()
    has_values = bool((batch.values != 1.0).any())
    parts = [
        _HEADER.pack(VERSION, n, nnz, has_values),
        batch.labels.astype(np.uint8).tobytes(),
        batch.indptr.astype("<u4").tobytes(),
        batch.ids.astype("<u8").tobytes(),
    ]
    if has_values:
        parts.append(batch.values.astype("<f8").tobytes())
    return b"".join(parts)


def decode_entry(blob: bytes) -> Batch:
    """The batch in a stream entry; :class:`EntryError` if it is not one of ours."""
    if len(blob) < _HEADER.size:
        raise EntryError(f"entry of {len(blob)} bytes is shorter than the header")
    version, n, nnz, has_values = _HEADER.unpack_from(blob)
    if version != VERSION:
        raise EntryError(f"unknown entry version {version}")
    expected = _HEADER.size + n + 4 * (n + 1) + 8 * nnz + (8 * nnz if has_values else 0)
    if len(blob) != expected:
        raise EntryError(f"entry has {len(blob)} bytes, its header implies {expected}")
    offset = _HEADER.size
    labels = np.frombuffer(blob, np.uint8, n, offset).astype(np.float64)
    offset += n
    indptr = np.frombuffer(blob, "<u4", n + 1, offset).astype(np.int64)
    offset += 4 * (n + 1)
    ids = np.frombuffer(blob, "<u8", nnz, offset).astype(np.uint64)
    offset += 8 * nnz
    values = np.frombuffer(blob, "<f8", nnz, offset).copy() if has_values else np.ones(nnz)
    if indptr[0] != 0 or indptr[-1] != nnz or (np.diff(indptr) < 0).any():
        raise EntryError("entry's row pointers are not monotone from 0 to nnz")
    if ((labels != 0) & (labels != 1)).any() or not np.isfinite(values).all():
        raise EntryError("entry has a label other than 0/1 or a non-finite value")
    return Batch(indptr, ids, values, labels)


def concat(batches: list[Batch]) -> Batch:
    """Several batches as one, in order."""
    if len(batches) == 1:
        return batches[0]
    offsets = np.cumsum([0] + [b.occurrences() for b in batches[:-1]])
    indptr = np.concatenate(
        [[0]] + [b.indptr[1:] + o for b, o in zip(batches, offsets, strict=True)]
    )
    return Batch(
        indptr=indptr.astype(np.int64),
        ids=np.concatenate([b.ids for b in batches]),
        values=np.concatenate([b.values for b in batches]),
        labels=np.concatenate([b.labels for b in batches]),
    )


def pack_ids(ids: NDArray[np.uint64]) -> bytes:
    """Feature ids as the 8-byte hash fields they are stored under."""
    return ids.astype("<u8").tobytes()


def pack_state(rows: NDArray[np.float64]) -> bytes:
    """State rows (fields then count), row after row, as float64."""
    return np.ascontiguousarray(rows, dtype="<f8").tobytes()


def unpack_state(blob: bytes, width: int) -> NDArray[np.float64]:
    """The inverse of :func:`pack_state`."""
    return np.frombuffer(blob, "<f8").reshape(-1, width).astype(np.float64)
