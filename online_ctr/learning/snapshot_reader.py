"""Reading a snapshot file (:mod:`online_ctr.learning.snapshot`) fed in pieces of any size:
its sections in order, each checksum, and every state row a state learning can produce."""

from __future__ import annotations

import hashlib
import zlib

import numpy as np

from online_ctr.learning.admission import COUNTERS
from online_ctr.learning.rules import get_rule
from online_ctr.learning.rules.base import MAX_STEP, Rule
from online_ctr.learning.snapshot import (
    DIGEST_BYTES,
    MAGIC,
    MAX_COUNTER_BYTES,
    MAX_JSON_BYTES,
    MAX_ROWS,
    PREAMBLE,
    SECTION,
    VERSION,
    AdmissionCounters,
    Footer,
    Header,
    Item,
    RowChunk,
    SnapshotError,
)
from online_ctr.learning.snapshot_footer import check_for_header, parse_footer
from online_ctr.learning.snapshot_header import parse_header


def _counters(payload: bytes) -> bytes:
    """The admission counters of a section's payload: at most :data:`COUNTERS` bytes."""
    try:
        counters = zlib.decompressobj().decompress(payload, COUNTERS + 1)
    except zlib.error as error:
        raise SnapshotError(f"the admission counters do not decompress: {error}") from None
    if len(counters) > COUNTERS:
        raise SnapshotError(f"the admission counters hold more than {COUNTERS} bytes")
    return counters


class Reader:
    """Parses a snapshot fed in pieces of any size; :meth:`feed` returns the items completed,
    :meth:`close` checks that the file ended where it should and returns its footer."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.digest = hashlib.sha256()
        self.consumed = 0
        self.header: Header | None = None
        self.rule: Rule | None = None
        self.footer: Footer | None = None
        self.rows_seen = 0
        self.latest_step = 0.0  # the latest step a row says its feature was touched at
        self.chunks = 0
        self.counters_seen = False
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
            raise SnapshotError(f"{self._name(kind)} is corrupt (its CRC32 does not match)")
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
        expected = b"H" if self.header is None else b"RAF" if self.footer is None else b"E"
        header = self.header
        if (
            kind == b"A"
            and header is not None
            and (self.counters_seen or header.admission == "all")
        ):
            expected = b"RF"  # once, and only for a model whose rule counts
        if kind not in (b"H", b"R", b"A", b"F") or kind not in expected:
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
        if kind == b"A":
            if size > MAX_COUNTER_BYTES:
                raise SnapshotError(f"the admission counters claim {size} bytes")
            return size
        if size > MAX_JSON_BYTES:
            raise SnapshotError(
                f"{self._expecting()} claims {size} bytes (at most {MAX_JSON_BYTES})"
            )
        return size

    def _parse(self, kind: bytes, size: int, payload: bytes) -> Item:
        if kind == b"H":
            self.header = parse_header(payload)
            self.rule = get_rule(self.header.rule)
            return self.header
        if kind == b"F":
            self.footer = self._after_rows(parse_footer(payload))
            return self.footer
        if kind == b"A":
            self.counters_seen = True
            return AdmissionCounters(_counters(payload))
        assert self.header is not None
        self.chunks += 1
        self.rows_seen += size
        ids = np.frombuffer(payload, "<u8", size).astype(np.uint64)
        state = np.frombuffer(payload, "<f8", size * self.header.width, 8 * size)
        bits = self.header.hash_bits or 64
        if bits < 64 and size and int(ids.max()) >> bits:
            raise SnapshotError(f"state chunk {self.chunks} has an id above {bits} hash bits")
        rows = RowChunk(ids, state.reshape(size, self.header.width).astype(np.float64))
        self._check_state(rows)
        return rows

    def _check_state(self, rows: RowChunk) -> None:
        """Every row is a state the rule's learning can produce (a negative ``n`` or a NaN
        would make the model's answers NaN, or its later updates fail)."""
        assert self.rule is not None and self.header is not None
        if self.header.stepped:
            self._check_steps(rows)
        # A row not stored is all zero, which every rule's check passes.
        fields = rows.state[:, : len(self.rule.fields)]
        problem = self.rule.state_problem(fields)
        if problem is not None:
            row, name, must = problem
            value = float(fields[row, self.rule.fields.index(name)])
            raise SnapshotError(
                f"state chunk {self.chunks} has a non-finite or impossible state value: feature "
                f"{int(rows.ids[row])} has {name} {value!r}, which must be {must}"
            )
        self.latest_step = max(self.latest_step, self.rule.latest_step(fields))

    def _check_steps(self, rows: RowChunk) -> None:
        """The rows' ``tau`` are steps (whole, >= 0), and a row of ``tau`` 0 (a feature not
        stored) is all zero."""
        tau = rows.state[:, -1]
        bad = ~((tau >= 0) & (tau < MAX_STEP) & (np.floor(tau) == tau))
        bad |= (tau == 0) & (rows.state != 0).any(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise SnapshotError(
                f"state chunk {self.chunks}: feature {int(rows.ids[row])} has tau "
                f"{float(tau[row])!r} and values {rows.state[row].tolist()}; tau must be a "
                "whole step in 1..2^53, or 0 with every value 0 (a feature not stored)"
            )
        if len(tau):
            self.latest_step = max(self.latest_step, float(tau.max()))

    def _after_rows(self, footer: Footer) -> Footer:
        """The footer's step is not before any row's last touch, only a model with a budget
        has its marks, and only one with a counting filter its admissions."""
        if self.latest_step > footer.t:
            raise SnapshotError(
                f"the footer's t {footer.t} is before step {self.latest_step:.0f}, at which "
                "a row says its feature was last touched"
            )
        assert self.header is not None
        check_for_header(footer, self.header)
        return footer

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
