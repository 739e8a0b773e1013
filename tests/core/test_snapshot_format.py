"""The snapshot file format: exact round trips, and every damage detected and named."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest

from online_ctr.snapshot import (
    MAX_ROWS,
    PREAMBLE,
    SECTION,
    Footer,
    Header,
    Reader,
    Rows,
    SnapshotError,
    Writer,
)

HEADER = Header("tg", {"alpha": 0.5, "beta": 1.0, "l1": 0.1, "theta": float("inf"), "k": 10},
                16, ("w", "n", "t_last"))  # fmt: skip
FOOTER = Footer(t=12345, logloss_sum=0.1 + 0.2, nonzero_weights=3, features_tracked=5,
                logloss_text="8550.1234567890123")  # fmt: skip


def snapshot(count: int = MAX_ROWS + 10, seed: int = 0) -> tuple[bytes, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 1 << 16, count, dtype=np.uint64)
    state = rng.standard_normal((count, 3)) * 10.0 ** rng.integers(-300, 300, (count, 3))
    writer = Writer()
    blob = writer.start(HEADER) + writer.rows(ids, state) + writer.finish(FOOTER)
    return blob, ids, state


def read(blob: bytes, piece: int = 1 << 20) -> tuple[list[object], Footer]:
    reader = Reader()
    items = []
    for first in range(0, len(blob), piece):
        items += reader.feed(blob[first : first + piece])
    return items, reader.close()


@pytest.mark.parametrize("piece", [1, 7, 4096, 1 << 30])
def test_round_trip_is_bit_exact_whatever_the_pieces(piece: int) -> None:
    blob, ids, state = snapshot(count=MAX_ROWS + 10 if piece > 1 else 300)
    items, footer = read(blob, piece)
    header, *rows = items[:-1]
    assert header == HEADER and items[-1] == footer
    assert footer.rows == len(ids)
    assert (footer.t, footer.logloss_sum, footer.logloss_text) == (
        12345,
        0.1 + 0.2,
        FOOTER.logloss_text,
    )
    got_ids = np.concatenate([r.ids for r in rows if isinstance(r, Rows)])
    got = np.concatenate([r.state for r in rows if isinstance(r, Rows)])
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(got.view(np.uint64), state.view(np.uint64))  # bit for bit
    if piece > 1:
        assert len(rows) == 2  # at most MAX_ROWS rows a chunk: what a reader holds at once
    assert isinstance(HEADER.params["k"], int) and isinstance(header.params["k"], int)  # type: ignore[union-attr]


def test_an_empty_model_round_trips() -> None:
    writer = Writer()
    blob = writer.start(HEADER) + writer.finish(Footer(0, 0.0, 0, 0))
    items, footer = read(blob)
    assert footer.rows == 0 and len(items) == 2


@pytest.mark.parametrize("cut", [0, 5, PREAMBLE.size, PREAMBLE.size + 3, 400, -40, -33, -1])
def test_truncation_anywhere_is_named(cut: int) -> None:
    blob = snapshot(count=20)[0]
    with pytest.raises(SnapshotError, match=r"truncated: it ends after \d+ bytes, inside"):
        read(blob[:cut])


def test_a_flipped_bit_in_each_part_is_caught() -> None:
    blob = snapshot(count=20)[0]
    header_end = PREAMBLE.size + SECTION.size + SECTION.unpack_from(blob, PREAMBLE.size)[1]
    cases = {
        PREAMBLE.size + SECTION.size + 2: "header",
        header_end + SECTION.size + 8: "state chunk 1",
        len(blob) - 40: "footer",
        len(blob) - 5: "SHA-256",
    }
    for at, named in cases.items():
        damaged = bytearray(blob)
        damaged[at] ^= 0x10
        with pytest.raises(SnapshotError, match=named):
            read(bytes(damaged))


def test_a_spliced_file_fails_its_checksum() -> None:
    # Two valid files' sections mixed: every CRC32 is right, the SHA-256 is not.
    one, two = snapshot(count=20, seed=1)[0], snapshot(count=20, seed=2)[0]
    cut = len(one) - 33 - 200
    spliced = one[:cut] + two[cut:]
    with pytest.raises(SnapshotError):
        read(spliced)


def test_wrong_magic_and_wrong_version_are_named() -> None:
    blob = snapshot(count=3)[0]
    with pytest.raises(SnapshotError, match="not an online-ctr snapshot"):
        read(b"\x89PNG" + blob[4:])
    newer = PREAMBLE.pack(b"OCTRSNAP", 2) + blob[PREAMBLE.size :]
    with pytest.raises(SnapshotError, match="format version 2; this online-ctr reads version 1"):
        read(newer)


def rebuilt(header: dict[str, object]) -> bytes:
    payload = json.dumps(header).encode()
    return (
        PREAMBLE.pack(b"OCTRSNAP", 1)
        + SECTION.pack(b"H", len(payload), zlib.crc32(payload))
        + payload
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rule": "sgd"}, "unknown rule 'sgd'"),
        ({"params": {"alpha": -1.0}}, "alpha must be > 0"),
        ({"params": {"alpha": "fast"}}, "not a number"),
        ({"fields": ["z"]}, r"state fields \['z'\] are not rule 'ftrl'"),
        ({"hash_bits": 65}, "hash_bits 65"),
    ],
)
def test_a_header_that_describes_no_valid_model_is_refused(
    change: dict[str, object], message: str
) -> None:
    header = {"rule": "ftrl", "params": {}, "hash_bits": None, "fields": ["z", "n"], **change}
    with pytest.raises(SnapshotError, match=message):
        Reader().feed(rebuilt(header))


def test_ids_beyond_the_hash_bits_and_non_finite_state_are_refused() -> None:
    writer = Writer()
    start = writer.start(HEADER)
    with pytest.raises(SnapshotError, match="above 16 hash bits"):
        Reader().feed(start + writer.rows(np.array([1 << 20], np.uint64), np.zeros((1, 3))))
    state = np.array([[np.nan, 0.0, 0.0]])
    with pytest.raises(SnapshotError, match="non-finite"):
        Reader().feed(start + writer.rows(np.array([1], np.uint64), state))


def test_sections_out_of_order_and_oversized_claims_are_refused() -> None:
    blob = snapshot(count=3)[0]
    rows_first = PREAMBLE.pack(b"OCTRSNAP", 1) + struct.pack("<cII", b"R", 1, 0)
    with pytest.raises(SnapshotError, match="unexpected section b'R'"):
        Reader().feed(rows_first)
    header_only = blob[: PREAMBLE.size + SECTION.size + SECTION.unpack_from(blob, PREAMBLE.size)[1]]
    with pytest.raises(SnapshotError, match=f"claims {MAX_ROWS + 1} rows"):
        Reader().feed(header_only + struct.pack("<cII", b"R", MAX_ROWS + 1, 0))
    with pytest.raises(SnapshotError, match="follow the end"):
        read(blob + b"\0")


def test_the_stored_settings_travel_in_the_header() -> None:
    header = Header("ftrl", {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}, None, ("z", "n"),
                    encoding="compact", numeric="log_bucket", calibration="power")  # fmt: skip
    writer = Writer()
    blob = writer.start(header) + writer.finish(FOOTER)
    items, _ = read(blob)
    assert items[0] == header
    # Left unset, they are what models had before the settings existed.
    older = Writer()
    plain = Header("ftrl", header.params, None, ("z", "n"))
    items, _ = read(older.start(plain) + older.finish(FOOTER))
    got = items[0]
    assert isinstance(got, Header)
    assert (got.encoding, got.numeric, got.calibration) == ("float64", "raw", "off")
