"""Writing a snapshot file (:mod:`online_ctr.learning.snapshot`) piece by piece, so that a
file can be streamed out as the model is read."""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import asdict
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning import eviction
from online_ctr.learning.retention import NEVER
from online_ctr.learning.rules.base import Array
from online_ctr.learning.snapshot import (
    BUDGET_MARKS,
    MAGIC,
    MAX_ROWS,
    OPTIONAL_FOOTER,
    PREAMBLE,
    SECTION,
    VERSION,
    Footer,
    Header,
)


def _section(kind: bytes, size: int, payload: bytes) -> bytes:
    return SECTION.pack(kind, size, zlib.crc32(payload)) + payload


def _json(value: dict[str, Any]) -> bytes:
    # repr-exact floats; params may hold inf (tg's theta), which JSON writes as Infinity.
    return json.dumps(value, sort_keys=True).encode()


class Writer:
    """Builds a snapshot piece by piece: :meth:`start`, :meth:`rows` any number of times,
    :meth:`finish`; each returns the bytes to append, so a file can be streamed out."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.width = 0
        self.count = 0

    def _out(self, blob: bytes) -> bytes:
        self.digest.update(blob)
        return blob

    def start(self, header: Header) -> bytes:
        self.width = header.width
        body = {**asdict(header), "fields": list(header.fields)}
        if header.admission == "all":  # as files written before admission existed
            del body["admission"]
        if header.expire_after == NEVER:  # as files written before expiry existed
            del body["expire_after"]
        if header.max_features == eviction.UNBOUNDED:  # as files written before budgets
            del body["max_features"]
        if header.base_rate == "off":  # as files written before the prior existed
            del body["base_rate"]
        if not header.crosses:  # as files written before crosses
            del body["crosses"]
        payload = _json(body)
        return self._out(PREAMBLE.pack(MAGIC, VERSION) + _section(b"H", len(payload), payload))

    def rows(self, ids: NDArray[np.uint64], state: Array) -> bytes:
        """Rows in chunks of at most :data:`MAX_ROWS`."""
        if state.shape != (len(ids), self.width):
            raise ValueError(f"state of shape {state.shape} for {len(ids)} ids")
        parts = []
        for first in range(0, len(ids), MAX_ROWS):
            chunk_ids = np.ascontiguousarray(ids[first : first + MAX_ROWS], "<u8")
            chunk = np.ascontiguousarray(state[first : first + MAX_ROWS], "<f8")
            payload = chunk_ids.tobytes() + chunk.tobytes()
            parts.append(_section(b"R", len(chunk_ids), payload))
        self.count += len(ids)
        return self._out(b"".join(parts))

    def counters(self, counters: bytes) -> bytes:
        """The admission counters' section (mostly zeros: compressed)."""
        payload = zlib.compress(counters, 1)
        return self._out(_section(b"A", len(payload), payload))

    def finish(self, footer: Footer) -> bytes:
        body = asdict(footer) | {"rows": self.count}
        if not footer.weight_excess:  # as files written before weights existed
            del body["weight_excess"]
        if not footer.features_expired:  # as files written before expiry existed
            del body["features_expired"]
        for mark in BUDGET_MARKS:  # as files written before budgets existed
            if not body[mark]:
                del body[mark]
        if not any(footer.admitted_recent):  # as files written before the periods were kept
            del body["admitted_recent"]
        for name in OPTIONAL_FOOTER:  # as files written before the prior existed
            if not body[name]:
                del body[name]
        payload = _json(body)
        end = self._out(_section(b"F", len(payload), payload) + b"E")
        return end + self.digest.digest()
