"""The byte encoding of feedback stream entries.

A stream entry holds one ``/learn`` request: its examples as a CSR batch of hashed ids, so the
worker never parses JSON or hashes strings. Layout (little endian)::

    u8 version=1 | u32 n | u32 nnz | u8 flags | u8 labels[n] | u32 indptr[n+1]
    | u64 ids[nnz] | f64 values[nnz] (only if flags & 1; otherwise every value is 1)
    | f64 weights[n] (only if flags & 2; otherwise every importance weight is 1)

Bit 1 of ``flags`` came with importance weights, and an entry with weights is version 2: a
worker from before weights refuses it (and dead-letters it) instead of reading its weights as
feature values. An entry without weights is version 1, byte for byte as before.

>>> from online_ctr.learning.features import FeatureHasher
>>> batch = FeatureHasher().batch([{"a": "x", "n": 2.0}], labels=[1])
>>> decoded = decode_entry(encode_entry(batch))
>>> decoded.ids.tolist() == batch.ids.tolist(), decoded.values.tolist(), decoded.labels.tolist()
(True, [1.0, 1.0, 2.0], [1.0])
>>> weighted = Batch(batch.indptr, batch.ids, batch.values, batch.labels, np.array([10.0]))
>>> decode_entry(encode_entry(weighted)).weights.tolist()
[10.0]
"""

from __future__ import annotations

import struct

import numpy as np

from online_ctr.learning.features import Batch

VERSION = 1
#: The version of an entry with importance weights.
WEIGHTED_VERSION = 2
#: The flags each version may set.
_FLAGS = {VERSION: 1, WEIGHTED_VERSION: 3}
_HEADER = struct.Struct("<BIIB")
#: The bits of the header's flags byte.
HAS_VALUES, HAS_WEIGHTS = 1, 2
#: Where a one-example entry's label byte is (join.lua sets it there).
LABEL_OFFSET = _HEADER.size


class EntryError(ValueError):
    """A stream entry that cannot be decoded."""


def encode_entry(batch: Batch) -> bytes:
    """One stream entry for a labelled batch."""
    n, nnz = len(batch), batch.occurrences()
    has_values = bool((batch.values != 1.0).any())
    has_weights = batch.weights is not None and bool((batch.weights != 1.0).any())
    flags = (HAS_VALUES if has_values else 0) | (HAS_WEIGHTS if has_weights else 0)
    parts = [
        _HEADER.pack(WEIGHTED_VERSION if has_weights else VERSION, n, nnz, flags),
        batch.labels.astype(np.uint8).tobytes(),
        batch.indptr.astype("<u4").tobytes(),
        batch.ids.astype("<u8").tobytes(),
    ]
    if has_values:
        parts.append(batch.values.astype("<f8").tobytes())
    if has_weights:
        assert batch.weights is not None  # for mypy: has_weights says so
        parts.append(batch.weights.astype("<f8").tobytes())
    return b"".join(parts)


def encode_rows(batch: Batch) -> list[bytes]:
    """Each example of ``batch`` as a one-example entry labelled 0, all encoded in one go:
    entry ``j`` is ``encode_entry`` of row ``j`` alone (its label byte then set by a join).
    The batch has no weights: a served impression has none until it is labelled."""
    indptr = batch.indptr.astype(np.int64)
    ids = batch.ids.astype("<u8").tobytes()
    values = batch.values.astype("<f8").tobytes()
    # Rows with a value other than 1 carry their values, as encode_entry would.
    other = np.concatenate(([0], np.cumsum(batch.values != 1.0)))
    has_values = (other[indptr[1:]] - other[indptr[:-1]] > 0).tolist()
    starts, ends = indptr[:-1].tolist(), indptr[1:].tolist()
    blobs = []
    for start, end, valued in zip(starts, ends, has_values, strict=True):
        nnz = end - start
        head = _HEADER.pack(VERSION, 1, nnz, valued) + _ZERO_LABEL + _ROW_POINTERS.pack(0, nnz)
        body = ids[8 * start : 8 * end]
        blobs.append(head + body + values[8 * start : 8 * end] if valued else head + body)
    return blobs


_ZERO_LABEL = b"\x00"
_ROW_POINTERS = struct.Struct("<II")


def header_examples(blob: bytes) -> int:
    """How many examples an entry says it holds (0 if it has no valid header)."""
    if len(blob) < _HEADER.size:
        return 0
    version, n, _, _ = _HEADER.unpack_from(blob)
    return int(n) if version in _FLAGS else 0


def decode_entry(blob: bytes) -> Batch:
    """The batch in a stream entry; :class:`EntryError` if it is not one of ours."""
    return decode_entries([blob])


def _split(blob: bytes) -> tuple[int, bytes, bytes, bytes, bytes | None, bytes | None]:
    """An entry's example count and its label, row-pointer, id, value and weight bytes."""
    if len(blob) < _HEADER.size:
        raise EntryError(f"entry of {len(blob)} bytes is shorter than the header")
    version, n, nnz, flags = _HEADER.unpack_from(blob)
    if version not in _FLAGS:
        raise EntryError(f"unknown entry version {version}")
    if flags & ~_FLAGS[version]:
        raise EntryError(f"entry version {version} with unknown flags {flags:#x}")
    ids_at = _HEADER.size + n + 4 * (n + 1)
    values_at = ids_at + 8 * nnz
    weights_at = values_at + (8 * nnz if flags & HAS_VALUES else 0)
    expected = weights_at + (8 * n if flags & HAS_WEIGHTS else 0)
    if len(blob) != expected:
        raise EntryError(f"entry has {len(blob)} bytes, its header implies {expected}")
    return (
        n,
        blob[_HEADER.size : _HEADER.size + n],
        blob[_HEADER.size + n : ids_at],
        blob[ids_at:values_at],
        blob[values_at:weights_at] if flags & HAS_VALUES else None,
        blob[weights_at:] if flags & HAS_WEIGHTS else None,
    )


def decode_entries(blobs: list[bytes]) -> Batch:
    """Several entries as one batch, decoded together (numpy once, not once per entry)."""
    parts = [_split(blob) for blob in blobs]
    labels = np.frombuffer(b"".join(p[1] for p in parts), np.uint8).astype(np.float64)
    ids = np.frombuffer(b"".join(p[3] for p in parts), "<u8").astype(np.uint64)
    sizes = np.frombuffer(b"".join(p[2] for p in parts), "<u4").astype(np.int64)
    # Each entry's row pointers start at 0; the batch's are the concatenated row lengths.
    starts = np.cumsum([0] + [p[0] + 1 for p in parts])
    lengths = np.diff(sizes)
    lengths = np.delete(lengths, starts[1:-1] - 1)
    values = np.concatenate(
        [np.frombuffer(p[4], "<f8") if p[4] is not None else np.ones(len(p[3]) // 8) for p in parts]
    )
    weights = None
    if any(p[5] is not None for p in parts):
        weights = np.concatenate(
            [np.frombuffer(p[5], "<f8") if p[5] is not None else np.ones(p[0]) for p in parts]
        ).astype(np.float64)
    nnz = np.array([len(p[3]) // 8 for p in parts])
    if (
        (lengths < 0).any()
        or (sizes[starts[:-1]] != 0).any()
        or (sizes[starts[1:] - 1] != nnz).any()
    ):
        raise EntryError("entry's row pointers are not monotone from 0 to its feature count")
    if ((labels != 0) & (labels != 1)).any() or not np.isfinite(values).all():
        raise EntryError("entry has a label other than 0/1 or a non-finite value")
    if weights is not None and not (np.isfinite(weights) & (weights > 0)).all():
        raise EntryError("entry has an importance weight that is not finite and above 0")
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return Batch(indptr, ids, values.astype(np.float64), labels, weights)
