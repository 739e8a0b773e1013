"""The snapshot file: one model (spec, every tracked feature's state, step and counters) in one
versioned, checksummed file, written and read as a stream. Pure: bytes in, bytes out, no I/O.

Layout, little-endian throughout::

    b"OCTRSNAP" | u32 version
    b"H" | u32 length | u32 crc32 | header JSON   (rule, params, hash_bits, fields, origin)
    b"R" | u32 count  | u32 crc32 | u64 ids[count] | f64 state[count][width]   (0 or more)
    b"F" | u32 length | u32 crc32 | footer JSON   (t, logloss_sum, counts, rows)
    b"E" | sha256 of every byte before the b"E"

Rows are written as they are read, and a later row of an id replaces an earlier one: an export
taken while the model learns writes what it scanned, then the commits it must roll forward
(:mod:`octr.store.snapshot_export`). The footer comes last because only then are the step
and counters known. Each section has a CRC32 (a damaged chunk is named), the whole file a
SHA-256 (a truncated or spliced file is caught). A reader holds at most one section in memory.

>>> header = Header("ftrl", {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}, None, ("z", "n"))
>>> writer = Writer()
>>> blob = writer.start(header) + writer.rows(np.array([7], np.uint64), np.ones((1, 2)))
>>> blob += writer.finish(Footer(t=3, logloss_sum=1.5, nonzero_weights=1, features_tracked=1))
>>> reader = Reader()
>>> items = reader.feed(blob)
>>> reader.close().t, [type(item).__name__ for item in items]
(3, ['Header', 'Rows', 'Footer'])
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.rules import get_rule
from online_ctr.rules.base import Array

MAGIC = b"OCTRSNAP"
VERSION = 1
PREAMBLE = struct.Struct("<8sI")
SECTION = struct.Struct("<cII")
#: Most rows per chunk, and longest JSON section: what a reader may have to hold at once.
MAX_ROWS = 1 << 16
MAX_JSON_BYTES = 1 << 20
DIGEST_BYTES = 32


class SnapshotError(ValueError):
    """A file that is not a valid snapshot; the message says what is wrong and where."""


@dataclass(frozen=True)
class Header:
    """What the model is: rule, hyper-parameters, hashing and state fields; ``origin`` and
    ``source`` say where it came from (for people; import ignores them)."""

    rule: str
    params: dict[str, float]
    hash_bits: int | None
    fields: tuple[str, ...]
    origin: str = "export"
    source: dict[str, Any] = field(default_factory=dict)
    #: The model's other stored settings (absent from a file: what models had before them).
    encoding: str = "float64"
    numeric: str = "raw"
    calibration: str = "off"

    @property
    def width(self) -> int:
        return len(self.fields)


@dataclass(frozen=True)
class Rows:
    """A chunk of feature ids and their state rows."""

    ids: NDArray[np.uint64]
    state: Array


@dataclass(frozen=True)
class Footer:
    """The model's step and counters at the state the rows describe."""

    t: int
    logloss_sum: float
    nonzero_weights: int
    features_tracked: int
    rows: int = 0
    source: dict[str, Any] = field(default_factory=dict)
    #: ``logloss_sum`` as Redis kept it (17 digits it adds to in long double): an import
    #: restores these digits, so that later sums are the original's, bit for bit.
    logloss_text: str = ""


Item = Header | Rows | Footer


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

    def finish(self, footer: Footer) -> bytes:
        body = asdict(footer) | {"rows": self.count}
        payload = _json(body)
        end = self._out(_section(b"F", len(payload), payload) + b"E")
        return end + self.digest.digest()


def parse_header(payload: bytes) -> Header:
    """The header section's JSON as a :class:`Header`, checked against the rule it names."""
    body = _load(payload, "header")
    try:
        header = Header(
            rule=str(body["rule"]),
            params={str(k): _number(v) for k, v in body["params"].items()},
            hash_bits=None if body["hash_bits"] is None else int(body["hash_bits"]),
            fields=tuple(str(f) for f in body["fields"]),
            origin=str(body.get("origin", "")),
            source=dict(body.get("source") or {}),
            encoding=str(body.get("encoding", "float64")),
            numeric=str(body.get("numeric", "raw")),
            calibration=str(body.get("calibration", "off")),
        )
        rule = get_rule(header.rule)
        rule.params_type(**header.params)
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise SnapshotError(f"the header is not a valid model description: {error}") from None
    if header.fields != rule.fields:
        raise SnapshotError(
            f"the header's state fields {list(header.fields)} are not rule "
            f"{rule.name!r}'s {list(rule.fields)}"
        )
    if header.hash_bits is not None and not 1 <= header.hash_bits <= 64:
        raise SnapshotError(f"the header's hash_bits {header.hash_bits} is not in 1..64")
    return header


def parse_footer(payload: bytes) -> Footer:
    body = _load(payload, "footer")
    try:
        footer = Footer(
            t=int(body["t"]),
            logloss_sum=float(body["logloss_sum"]),
            nonzero_weights=int(body["nonzero_weights"]),
            features_tracked=int(body["features_tracked"]),
            rows=int(body["rows"]),
            source=dict(body.get("source") or {}),
            logloss_text=str(body.get("logloss_text") or ""),
        )
        float(footer.logloss_text or 0.0)  # a number, if given
    except (KeyError, TypeError, ValueError) as error:
        raise SnapshotError(f"the footer is not valid: {error}") from None
    return footer


def _number(value: object) -> float:
    """A hyper-parameter as written: an int stays one (a period ``k`` is compared as such)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"hyper-parameter {value!r} is not a number")
    return value


def _load(payload: bytes, what: str) -> dict[str, Any]:
    try:
        body = json.loads(payload)
    except ValueError:
        raise SnapshotError(f"the {what} is not JSON") from None
    if not isinstance(body, dict):
        raise SnapshotError(f"the {what} is not a JSON object")
    return body


class Reader:
    """Parses a snapshot fed in pieces of any size; :meth:`feed` returns the items completed,
    :meth:`close` checks that the file ended where it should and returns its footer."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.digest = hashlib.sha256()
        self.consumed = 0
        self.header: Header | None = None
        self.footer: Footer | None = None
        self.rows_seen = 0
        self.chunks = 0
        self.done = False

    def feed(self, data: bytes) -> list[Item]:
        self.buffer += data
        items: list[Item] = []
        while True:
            item = self._next()
            if item is None:
                return items
            items.append(item)

    def close(self) -> Footer:
        if not self.done:
            raise SnapshotError(
                f"the file is truncated: it ends after {self.consumed + len(self.buffer)} "
                f"bytes, inside {self._expecting()}"
            )
        assert self.footer is not None
        if self.footer.rows != self.rows_seen:
            raise SnapshotError(
                f"the footer counts {self.footer.rows} rows, the file has {self.rows_seen}"
            )
        return self.footer

    def _expecting(self) -> str:
        if self.consumed == 0:
            return "the preamble (magic and version)"
        if self.header is None:
            return "the header"
        if self.footer is None:
            return f"the state (after {self.chunks} chunks) or the footer"
        return "the final checksum"

    def _take(self, size: int) -> bytes:
        blob = bytes(self.buffer[:size])
        del self.buffer[:size]
        self.digest.update(blob)
        self.consumed += size
        return blob

    def _next(self) -> Item | None:
        if self.done:
            if self.buffer:
                raise SnapshotError(f"{len(self.buffer)} bytes follow the end of the snapshot")
            return None
        if self.consumed == 0:
            return self._preamble()
        if len(self.buffer) < 1:
            return None
        kind = bytes(self.buffer[:1])
        if kind == b"E":
            return self._end()
        if len(self.buffer) < SECTION.size:
            return None
        _, size, crc = SECTION.unpack_from(self.buffer)
        length = self._length(kind, size)
        if len(self.buffer) < SECTION.size + length:
            return None
        payload = self._take(SECTION.size + length)[SECTION.size :]
        if zlib.crc32(payload) != crc:
            raise SnapshotError(f"the {self._name(kind)} is corrupt (its CRC32 does not match)")
        return self._parse(kind, size, payload)

    def _name(self, kind: bytes) -> str:
        return f"state chunk {self.chunks + 1}" if kind == b"R" else self._expecting()

    def _preamble(self) -> Item | None:
        start = bytes(self.buffer[: len(MAGIC)])
        if not MAGIC.startswith(start):
            raise SnapshotError("not an online-ctr snapshot (it does not start with OCTRSNAP)")
        if len(self.buffer) < PREAMBLE.size:
            return None
        _, version = PREAMBLE.unpack(self._take(PREAMBLE.size))
        if version != VERSION:
            raise SnapshotError(
                f"snapshot format version {version}; this online-ctr reads version {VERSION}"
            )
        return self._next()

    def _length(self, kind: bytes, size: int) -> int:
        """The payload length a section's kind and size imply, refusing what is out of order."""
        expected = b"H" if self.header is None else b"RF" if self.footer is None else b"E"
        if kind not in (b"H", b"R", b"F") or kind not in expected:
            wanted = self._expecting()
            raise SnapshotError(
                f"unexpected section {kind!r} at byte {self.consumed}, expected {wanted}"
            )
        if kind == b"R":
            if size > MAX_ROWS:
                raise SnapshotError(
                    f"state chunk {self.chunks + 1} claims {size} rows (at most {MAX_ROWS})"
                )
            assert self.header is not None
            return 8 * size * (1 + self.header.width)
        if size > MAX_JSON_BYTES:
            raise SnapshotError(
                f"the {self._expecting()} claims {size} bytes (at most {MAX_JSON_BYTES})"
            )
        return size

    def _parse(self, kind: bytes, size: int, payload: bytes) -> Item:
        if kind == b"H":
            self.header = parse_header(payload)
            return self.header
        if kind == b"F":
            self.footer = parse_footer(payload)
            return self.footer
        assert self.header is not None
        self.chunks += 1
        self.rows_seen += size
        ids = np.frombuffer(payload, "<u8", size).astype(np.uint64)
        state = np.frombuffer(payload, "<f8", size * self.header.width, 8 * size)
        bits = self.header.hash_bits or 64
        if bits < 64 and size and int(ids.max()) >> bits:
            raise SnapshotError(f"state chunk {self.chunks} has an id above {bits} hash bits")
        if not np.isfinite(state).all():
            raise SnapshotError(f"state chunk {self.chunks} has a non-finite state value")
        return Rows(ids, state.reshape(size, self.header.width).astype(np.float64))

    def _end(self) -> Item | None:
        if self.footer is None:
            raise SnapshotError(f"the end mark comes before the footer (byte {self.consumed})")
        if len(self.buffer) < 1 + DIGEST_BYTES:
            return None
        self._take(1)
        expected = self.digest.digest()
        if bytes(self.buffer[:DIGEST_BYTES]) != expected:
            raise SnapshotError("the file's SHA-256 does not match: it was altered or spliced")
        del self.buffer[:DIGEST_BYTES]
        self.consumed += DIGEST_BYTES
        self.done = True
        return self._next()
