"""The snapshot file format: exact round trips, and every damage detected and named."""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from dataclasses import asdict, replace

import numpy as np
import pytest

from online_ctr.learning.admission import COUNTERS, PERIODS
from online_ctr.learning.snapshot import (
    BUDGET_MARKS,
    MAX_JSON_BYTES,
    MAX_ROWS,
    PREAMBLE,
    SECTION,
    AdmissionCounters,
    Footer,
    Header,
    RowChunk,
    SnapshotError,
)
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.learning.snapshot_writer import Writer

HEADER = Header("tg", {"alpha": 0.5, "beta": 1.0, "l1": 0.1, "theta": float("inf"), "k": 10},
                16, ("w", "n", "t_last"))  # fmt: skip
# logloss_text: the sum's 17 digits as Redis kept them (in long double), which float() rounds.
FOOTER = Footer(t=12345, logloss_sum=float("8550.1234567890123"), nonzero_weights=2,
                features_tracked=3, logloss_text="8550.1234567890123")  # fmt: skip

EMPTY = Footer(t=0, logloss_sum=0.0, nonzero_weights=0, features_tracked=0)


def snapshot(count: int = MAX_ROWS + 10, seed: int = 0) -> tuple[bytes, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 1 << 16, count, dtype=np.uint64)
    state = rng.standard_normal((count, 3)) * 10.0 ** rng.integers(-300, 300, (count, 3))
    # Every bit pattern a state can hold: n of any magnitude >= 0, t_last a step up to t.
    state[:, 1] = np.abs(state[:, 1])
    state[:, 2] = rng.integers(0, FOOTER.t + 1, count)
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
        8550.1234567890123,
        FOOTER.logloss_text,
    )
    got_ids = np.concatenate([r.ids for r in rows if isinstance(r, RowChunk)])
    got = np.concatenate([r.state for r in rows if isinstance(r, RowChunk)])
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
    blob = writer.start(header) + writer.finish(EMPTY)
    items, _ = read(blob)
    assert items[0] == header
    # Left unset, they are what models had before the settings existed.
    older = Writer()
    plain = Header("ftrl", header.params, None, ("z", "n"))
    items, _ = read(older.start(plain) + older.finish(EMPTY))
    got = items[0]
    assert isinstance(got, Header)
    assert (got.encoding, got.numeric, got.calibration) == ("float64", "raw", "off")


def with_footer(footer: dict[str, object], state: np.ndarray | None = None) -> bytes:
    """A file of HEADER whose footer is ``footer`` as given (checksums right): what a writer
    that meant harm, or had a bug, could send."""
    writer = Writer()
    rows = np.zeros((1, 3)) if state is None else state
    blob = writer.start(HEADER) + writer.rows(np.arange(len(rows), dtype=np.uint64), rows)
    payload = json.dumps(footer).encode()
    blob += SECTION.pack(b"F", len(payload), zlib.crc32(payload)) + payload + b"E"
    return blob + hashlib.sha256(blob).digest()


GOOD = {"t": 10, "logloss_sum": 1.5, "nonzero_weights": 0, "features_tracked": 1, "rows": 1}


def test_a_footer_that_a_model_cannot_have_is_refused_naming_its_field() -> None:
    # Issue 31: t -1000 imported as global_step -1000 (a negative log loss); 2^63 and 10^30
    # dead-lettered every later example (OverflowError); a NaN sum half-applied every commit.
    cases = [
        ({"t": -1000}, "the footer's t -1000 is not a step: it must be a whole number in 0..2^53"),
        ({"t": 2**63}, "t 9223372036854775808 is not a step"),
        ({"t": 10**30}, "the footer's t 1000000000000000000000000000000 is not a step"),
        ({"t": 2**53}, "is not a step"),
        ({"t": 1.5}, "t 1.5 is not a step"),
        ({"t": True}, "t True is not a step"),
        ({"logloss_sum": float("nan")}, "logloss_sum nan is not a sum of log losses"),
        ({"logloss_sum": float("inf")}, "logloss_sum inf is not a sum of log losses"),
        ({"logloss_sum": -0.5}, "logloss_sum -0.5 is not a sum of log losses"),
        ({"logloss_sum": 10**400}, "is not a sum of log losses"),
        ({"logloss_text": "nan"}, "logloss_text 'nan' is not its logloss_sum 1.5"),
        ({"logloss_text": "1.25"}, "logloss_text '1.25' is not its logloss_sum"),
        ({"logloss_text": 1.5}, "logloss_text 1.5 is not a number"),
        ({"rows": -1}, "the footer's rows -1 is not a count"),
        ({"features_tracked": -1}, "features_tracked -1 is not a count"),
        ({"features_expired": -1}, "features_expired -1 is not a count"),
        ({"features_expired": 0.5}, "features_expired 0.5 is not a count"),
        ({"nonzero_weights": 2}, "2 nonzero weights, 1 features and 1 rows"),
        ({"t": 2}, "the footer's t 2 is before step 3, at which a row says"),
    ]
    state = np.array([[0.5, 1.0, 3.0]])
    for change, message in cases:
        with pytest.raises(SnapshotError, match=re.escape(message)):
            read(with_footer(GOOD | change, state))
    assert read(with_footer(GOOD | {"logloss_text": "1.5"}, state))[1].t == 10


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (1, -1.0, "feature 0 has n -1.0, which must be a sum of squared gradients, >= 0"),
        (1, np.inf, "has n inf"),
        (0, np.nan, "has w nan, which must be a finite number"),
        (0, -np.inf, "has w -inf"),
        (2, -1.0, "has t_last -1.0, which must be a step, a whole number in 0..2^53"),
        (2, 2.5, "has t_last 2.5"),
        (2, 2.0**53, "has t_last 9007199254740992.0"),
    ],
)
def test_a_state_row_that_learning_cannot_produce_is_refused(
    column: int, value: float, message: str
) -> None:
    # Issue 31: a row with n < 0 was imported, and /predict then answered probability null.
    state = np.array([[0.5, 1.0, 3.0]])
    state[0, column] = value
    with pytest.raises(SnapshotError, match="state chunk 1 has a non-finite or impossible"):
        read(with_footer(GOOD, state))
    with pytest.raises(SnapshotError, match=re.escape(message)):
        read(with_footer(GOOD, state))


def test_ftrl_state_needs_n_not_negative() -> None:
    header = Header("ftrl", {}, None, ("z", "n"))
    writer = Writer()
    blob = writer.start(header) + writer.rows(np.array([7], np.uint64), np.array([[1.0, -4.0]]))
    with pytest.raises(SnapshotError, match=re.escape("feature 7 has n -4.0")):
        Reader().feed(blob)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"encoding": "evil"}, "the header's encoding 'evil' is not one of float64, compact"),
        ({"numeric": "cubed"}, "the header's numeric 'cubed' is not one of log_bucket, raw"),
        ({"calibration": 1}, "the header's calibration 1 is not one of off, power"),
        ({"rule": "rda", "fields": ["z"], "encoding": "compact"}, "compact state encoding"),
        ({"params": {"alpha": float("nan")}}, "hyper-parameter alpha is NaN"),
        ({"hash_bits": True}, "hash_bits True is not in 1..64"),
        ({"hash_bits": "12"}, "hash_bits '12' is not in 1..64"),
        ({"params": None}, "not a valid model description"),
    ],
)
def test_a_header_with_an_unknown_setting_is_refused(
    change: dict[str, object], message: str
) -> None:
    # Issue 31: "encoding": "evil" was answered 500 (it failed when the model was written).
    header = {"rule": "ftrl", "params": {}, "hash_bits": None, "fields": ["z", "n"], **change}
    with pytest.raises(SnapshotError, match=re.escape(message)):
        Reader().feed(rebuilt(header))


def test_a_header_nested_beyond_the_parser_is_a_snapshot_error() -> None:
    # Issue 31: 500k nested '[' raised RecursionError (a 500) instead of naming the header.
    nested = b"[" * 500_000 + b"]" * 500_000
    blob = (
        PREAMBLE.pack(b"OCTRSNAP", 1) + SECTION.pack(b"H", len(nested), zlib.crc32(nested)) + nested
    )
    with pytest.raises(SnapshotError, match="the header nests too deeply"):
        Reader().feed(blob)


def test_messages_name_a_section_once() -> None:
    # "the the header is corrupt": the section's name already has its article.
    blob = bytearray(snapshot(count=3)[0])
    blob[PREAMBLE.size + SECTION.size + 2] ^= 0x10
    with pytest.raises(SnapshotError, match=r"^the header is corrupt"):
        read(bytes(blob))
    huge = PREAMBLE.pack(b"OCTRSNAP", 1) + SECTION.pack(b"H", MAX_JSON_BYTES + 1, 0)
    with pytest.raises(SnapshotError, match=r"^the header claims"):
        Reader().feed(huge)


BLOOM = Header("ftrl", {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}, None, ("z", "n"),
               admission="bloom:2")  # fmt: skip


def test_the_admission_rule_and_its_counters_travel() -> None:
    counters = bytes(range(256)) * 16
    writer = Writer()
    blob = writer.start(BLOOM) + writer.counters(counters) + writer.finish(EMPTY)
    items, _ = read(blob, piece=5)
    assert items[0] == BLOOM and items[1] == AdmissionCounters(counters)
    # A model admitting every feature writes no admission field: files as before.
    plain = Writer()
    assert b"admission" not in plain.start(replace(BLOOM, admission="all"))


def counters_section(payload: bytes) -> bytes:
    return struct.pack("<cII", b"A", len(payload), zlib.crc32(payload)) + payload


@pytest.mark.parametrize(
    ("header", "payloads", "says"),
    [
        (replace(BLOOM, admission="all"), [zlib.compress(b"\1")], "unexpected section b'A'"),
        (BLOOM, [zlib.compress(b"\1"), zlib.compress(b"\1")], "unexpected section b'A'"),
        (BLOOM, [b"not zlib"], "do not decompress"),
        (BLOOM, [zlib.compress(bytes(COUNTERS + 1))], f"more than {COUNTERS} bytes"),
    ],
)
def test_admission_counters_that_cannot_be_a_models_are_refused(
    header: Header, payloads: list[bytes], says: str
) -> None:
    blob = Writer().start(header) + b"".join(counters_section(p) for p in payloads)
    with pytest.raises(SnapshotError, match=says):
        Reader().feed(blob)


def test_a_header_with_a_bad_admission_rule_is_refused() -> None:
    body = {**asdict(BLOOM), "fields": ["z", "n"], "admission": "bloom:0"}
    payload = json.dumps(body).encode()
    section = struct.pack("<cII", b"H", len(payload), zlib.crc32(payload))
    blob = PREAMBLE.pack(b"OCTRSNAP", 1) + section + payload
    with pytest.raises(SnapshotError, match="bloom:0"):
        Reader().feed(blob)


#: A counting filter's admissions per halving period (period k at k % 8).
ADMITTED = (5, 0, 3, 0, 0, 0, 2**53 - 1, 1)


def bloom_file(footer: dict[str, object], header: Header = BLOOM) -> bytes:
    """A file of ``header`` (no rows; counters if it counts) whose footer is ``footer`` as
    given (checksums right)."""
    writer = Writer()
    blob = writer.start(header)
    if header.admission.startswith("bloom"):
        blob += writer.counters(b"\1\0\2")
    payload = json.dumps(footer).encode()
    blob += SECTION.pack(b"F", len(payload), zlib.crc32(payload)) + payload + b"E"
    return blob + hashlib.sha256(blob).digest()


#: The footer of a file of no rows, as JSON.
NO_ROWS = {"t": 10, "logloss_sum": 1.5, "nonzero_weights": 0, "features_tracked": 0, "rows": 0}


def test_a_filters_admissions_per_period_round_trip() -> None:
    writer = Writer()
    footer = replace(EMPTY, admitted_recent=ADMITTED)
    blob = writer.start(BLOOM) + writer.counters(b"\1\0\2") + writer.finish(footer)
    items, got = read(blob, piece=5)
    assert got == footer and items[-1] == footer
    assert sections(blob, 2)[b"F"]["admitted_recent"] == list(ADMITTED)


def test_a_footer_without_admissions_per_period_reads_as_none_admitted() -> None:
    # As files written before the footer carried them, and as the writer writes all zeros.
    _, got = read(bloom_file(NO_ROWS))
    assert got.admitted_recent == (0,) * PERIODS
    writer = Writer()
    blob = writer.start(BLOOM) + writer.counters(b"\1") + writer.finish(EMPTY)
    assert "admitted_recent" not in sections(blob, 2)[b"F"]
    assert read(blob)[1].admitted_recent == (0,) * PERIODS


@pytest.mark.parametrize(
    "value",
    [
        [1, 2, 3],
        [0] * (PERIODS + 1),
        [],
        [0, 0, 0, -1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 1.5],
        [0, 0, 0, 0, 0, 0, 0, 1.0],
        ["3", 0, 0, 0, 0, 0, 0, 0],
        [True, 0, 0, 0, 0, 0, 0, 0],
        [None, 0, 0, 0, 0, 0, 0, 0],
        [2**53, 0, 0, 0, 0, 0, 0, 0],
        "0 0 0 0 0 0 0 0",
        8,
        {"0": 1},
        None,
    ],
)
def test_admissions_per_period_a_filter_cannot_have_are_refused_naming_the_field(
    value: object,
) -> None:
    message = (
        "is not the features admitted in each of 8 halving periods: it must be a list of 8 "
        "whole numbers in 0..2^53"
    )
    with pytest.raises(
        SnapshotError, match="^the footer's admitted_recent .*" + re.escape(message)
    ):
        read(bloom_file(NO_ROWS | {"admitted_recent": value}))


@pytest.mark.parametrize("admission", ["all", "poisson:0.5"])
def test_admissions_per_period_without_a_counting_filter_are_refused(admission: str) -> None:
    header = replace(BLOOM, admission=admission)
    message = (
        "the footer's admitted_recent [5, 0, 3, 0, 0, 0, 9007199254740991, 1] is a counting "
        "filter's, and the header's admission is not bloom"
    )
    with pytest.raises(SnapshotError, match=re.escape(message)):
        read(bloom_file(NO_ROWS | {"admitted_recent": list(ADMITTED)}, header))
    # None admitted is what every model without a filter has.
    zeros = NO_ROWS | {"admitted_recent": [0] * PERIODS}
    assert read(bloom_file(zeros, header))[1].admitted_recent == (0,) * PERIODS


EXPIRING = Header("ftrl", {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}, None, ("z", "n"),
                  expire_after=200)  # fmt: skip


def expiring_file(state: np.ndarray, footer: Footer) -> bytes:
    writer = Writer()
    ids = np.arange(len(state), dtype=np.uint64)
    return writer.start(EXPIRING) + writer.rows(ids, state) + writer.finish(footer)


def test_an_expiring_models_rows_carry_tau_and_a_row_of_tau_0_is_a_deletion() -> None:
    # Stored (tau 7), past its end but not yet deleted (tau 1), and not stored (all 0).
    state = np.array([[-0.5, 4.0, 7.0], [0.25, 1.0, 1.0], [0.0, 0.0, 0.0]])
    footer = Footer(t=400, logloss_sum=2.5, nonzero_weights=1, features_tracked=2,
                    features_expired=9)  # fmt: skip
    items, got = read(expiring_file(state, footer), piece=3)
    assert items[0] == EXPIRING and EXPIRING.width == 3
    chunk = items[1]
    assert isinstance(chunk, RowChunk)
    np.testing.assert_array_equal(chunk.state, state)
    assert got.features_expired == 9 and got.rows == 3
    # A model that keeps every feature writes neither field: files as before.
    plain = Writer()
    blob = plain.start(replace(EXPIRING, expire_after=0)) + plain.finish(EMPTY)
    assert b"expire_after" not in blob and b"features_expired" not in blob
    assert read(blob)[1].features_expired == 0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ([0.5, 1.0, -3.0], "feature 0 has tau -3.0 and values [0.5, 1.0, -3.0]; tau must be"),
        ([0.5, 1.0, 2.5], "has tau 2.5"),
        ([0.5, 1.0, np.nan], "has tau nan"),
        ([0.5, 1.0, np.inf], "has tau inf"),
        ([0.5, 1.0, 2.0**53], "has tau 9007199254740992.0"),
        ([0.5, 0.0, 0.0], "or 0 with every value 0 (a feature not stored)"),
        ([0.0, -1.0, 5.0], "feature 0 has n -1.0, which must be a sum of squared gradients"),
    ],
)
def test_an_expiring_row_that_no_model_holds_is_refused(row: list[float], message: str) -> None:
    footer = Footer(t=10, logloss_sum=0.5, nonzero_weights=0, features_tracked=1)
    with pytest.raises(SnapshotError, match=re.escape(message)):
        read(expiring_file(np.array([row]), footer))


def test_an_expiring_rows_tau_is_a_step_the_footer_has_reached() -> None:
    footer = Footer(t=10, logloss_sum=0.5, nonzero_weights=0, features_tracked=1)
    with pytest.raises(SnapshotError, match="t 10 is before step 11, at which a row says"):
        read(expiring_file(np.array([[0.5, 1.0, 11.0]]), footer))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"expire_after": -1}, "the header's expire_after must be a whole number"),
        ({"expire_after": 2.5}, "got 2.5"),
        ({"expire_after": True}, "got True"),
        ({"expire_after": 2**53}, "from 1 to 2^52"),
        ({"expire_after": 9, "encoding": "compact"},
         "the header's expire_after needs the header's encoding float64"),
    ],
)  # fmt: skip
def test_a_span_a_model_cannot_have_is_refused(change: dict[str, object], message: str) -> None:
    header = {"rule": "ftrl", "params": {}, "hash_bits": None, "fields": ["z", "n"], **change}
    with pytest.raises(SnapshotError, match=re.escape(message)):
        Reader().feed(rebuilt(header))


BUDGETED = Header("ftrl", {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}, None, ("z", "n"),
                  max_features=500)  # fmt: skip
#: A budget's footer at step 400 (bins 0..6 of 64 examples): 2 features stored, 1 held, 9
#: evicted, zero weights up to step 256, every feature up to step 128.
BUDGET_FOOTER = Footer(t=400, logloss_sum=2.5, nonzero_weights=1, features_tracked=2,
                       features_held=1, features_evicted=9, cut_zero=256, cut_all=128,
                       budget_lowest=2)  # fmt: skip


def budget_file(state: np.ndarray, footer: Footer, header: Header = BUDGETED) -> bytes:
    writer = Writer()
    ids = np.arange(len(state), dtype=np.uint64)
    return writer.start(header) + writer.rows(ids, state) + writer.finish(footer)


def sections(blob: bytes, width: int) -> dict[bytes, dict[str, object]]:
    """The header's and the footer's JSON of a file of rows of ``width``, by section kind."""
    found, at = {}, PREAMBLE.size
    while blob[at : at + 1] != b"E":
        kind, size, _ = SECTION.unpack_from(blob, at)
        at += SECTION.size
        length = 8 * size * (1 + width) if kind == b"R" else size
        if kind in (b"H", b"F"):
            found[kind] = json.loads(blob[at : at + length])
        at += length
    return found


def test_a_budgets_setting_and_marks_round_trip_and_rows_carry_tau() -> None:
    # Held (tau 300), stored but evicted (tau 100 <= cut_all), and not stored (all 0).
    state = np.array([[-5.0, 4.0, 300.0], [-5.0, 1.0, 100.0], [0.0, 0.0, 0.0]])
    blob = budget_file(state, BUDGET_FOOTER)
    items, footer = read(blob, piece=5)
    assert items[0] == BUDGETED and BUDGETED.width == 3
    assert footer == replace(BUDGET_FOOTER, rows=3)
    chunk = items[1]
    assert isinstance(chunk, RowChunk)
    np.testing.assert_array_equal(chunk.state, state)
    assert footer.marks().tolist() == [2, 1, 9, 256, 128]  # LOWEST .. CUT_ALL
    written = sections(blob, 3)
    assert written[b"H"]["max_features"] == 500
    marks = {mark: written[b"F"][mark] for mark in BUDGET_MARKS}
    assert marks == {"features_held": 1, "features_evicted": 9, "cut_zero": 256, "cut_all": 128,
                     "budget_lowest": 2}  # fmt: skip


def test_a_file_without_a_budget_is_written_and_read_as_before() -> None:
    plain = replace(BUDGETED, max_features=0)
    footer = Footer(t=400, logloss_sum=2.5, nonzero_weights=1, features_tracked=1)
    blob = budget_file(np.array([[-5.0, 4.0]]), footer, plain)
    # The JSON of files written before budgets existed: no key of theirs, not even as 0.
    written = sections(blob, 2)
    assert set(written[b"H"]) == {"rule", "params", "hash_bits", "fields", "origin", "source",
                                  "encoding", "numeric", "calibration"}  # fmt: skip
    assert set(written[b"F"]) == {"t", "logloss_sum", "nonzero_weights", "features_tracked",
                                  "rows", "source", "logloss_text"}  # fmt: skip
    items, got = read(blob)
    assert items[0] == plain and plain.width == 2
    assert [getattr(got, mark) for mark in BUDGET_MARKS] == [0, 0, 0, 0, 0]
    assert got.marks().tolist() == [0, 0, 0, 0, 0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_features": -1}, "the header's max_features must be a whole number"),
        ({"max_features": 2.5}, "got 2.5"),
        ({"max_features": True}, "got True"),
        ({"max_features": 2**53}, "from 1 to 2^52"),
        ({"max_features": 9, "expire_after": 20},
         "the header has expire_after 20 and max_features 9: a model has one or the other"),
        ({"max_features": 9, "encoding": "compact"},
         "the header's max_features needs the header's encoding float64"),
    ],
)  # fmt: skip
def test_a_budget_a_model_cannot_have_is_refused(change: dict[str, object], message: str) -> None:
    header = {"rule": "ftrl", "params": {}, "hash_bits": None, "fields": ["z", "n"], **change}
    with pytest.raises(SnapshotError, match=re.escape(message)):
        Reader().feed(rebuilt(header))


#: The footer of BUDGETED's file of one held row (tau 300) at step 400, as JSON.
BUDGET_GOOD = GOOD | {"t": 400, "features_held": 1, "features_evicted": 9, "cut_zero": 256,
                      "cut_all": 128, "budget_lowest": 2}  # fmt: skip


def with_budget_footer(footer: dict[str, object], header: Header = BUDGETED) -> bytes:
    """A file of ``header`` (rows with ``tau``) and one held row whose footer is ``footer``
    as given (checksums right)."""
    writer = Writer()
    blob = writer.start(header) + writer.rows(np.array([1], np.uint64), np.array([[-5, 4, 300.0]]))
    payload = json.dumps(footer).encode()
    blob += SECTION.pack(b"F", len(payload), zlib.crc32(payload)) + payload + b"E"
    return blob + hashlib.sha256(blob).digest()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"features_held": -1}, "the footer's features_held -1 is not a count"),
        ({"features_held": 2},
         "the footer counts 0 nonzero weights, 2 features held and 1 stored: a budget holds "
         "some of the features stored"),
        ({"features_held": 0, "nonzero_weights": 1}, "1 nonzero weights, 0 features held"),
        ({"features_evicted": -1}, "the footer's features_evicted -1 is not a count"),
        ({"features_evicted": 0.5}, "features_evicted 0.5 is not a count"),
        ({"cut_zero": -64}, "the footer's cut_zero -64 is not a step"),
        ({"cut_all": 1.5}, "the footer's cut_all 1.5 is not a step"),
        ({"budget_lowest": -1}, "the footer's budget_lowest -1 is not a bin"),
        ({"budget_lowest": "2"}, "the footer's budget_lowest '2' is not a bin"),
        ({"cut_all": 320},
         "the footer's cut_all 320, cut_zero 256 and t 400 are not cutoffs a budget has: "
         "cut_all <= cut_zero <= t"),
        ({"cut_zero": 448, "cut_all": 0}, "cut_zero 448 and t 400 are not cutoffs"),
        # Step 400 is in bin 6: a later bin is not kept yet.
        ({"budget_lowest": 7}, "the footer's budget_lowest 7 is not a bin a budget keeps at "
                               "step 400: it must be in 0..6"),
        # At step 64 * 20,000 the window of 16,384 bins starts at bin 3,616.
        ({"t": 64 * 20_000, "budget_lowest": 3_615}, "it must be in 3616..19999"),
    ],
)  # fmt: skip
def test_budget_marks_a_budget_cannot_have_are_refused_naming_the_field(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(SnapshotError, match=re.escape(message)):
        read(with_budget_footer(BUDGET_GOOD | change))


@pytest.mark.parametrize(
    ("t", "lowest"),
    [(300, 0), (384, 5), (385, 6), (64 * 20_000, 3_616), (64 * 20_000, 19_999)],
)
def test_every_bin_of_the_window_is_a_budgets_oldest(t: int, lowest: int) -> None:
    footer = BUDGET_GOOD | {"t": t, "budget_lowest": lowest}
    assert read(with_budget_footer(footer))[1].budget_lowest == lowest


@pytest.mark.parametrize(
    ("marks", "named"),
    [
        ({"features_held": 1}, "features_held 1"),
        ({"features_evicted": 3}, "features_evicted 3"),
        ({"cut_zero": 64}, "cut_zero 64"),
        ({"cut_zero": 64, "cut_all": 64}, "cut_zero 64"),
        ({"budget_lowest": 1}, "budget_lowest 1"),
    ],
)
def test_budget_marks_without_a_budget_are_refused(marks: dict[str, int], named: str) -> None:
    plain = replace(BUDGETED, max_features=0, expire_after=1000)  # tau, but no budget
    message = f"the footer's {named} is a feature budget's, and the header has no max_features"
    with pytest.raises(SnapshotError, match=re.escape(message)):
        read(with_budget_footer(GOOD | {"t": 400} | marks, plain))


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ([0.5, 1.0, -3.0], "feature 0 has tau -3.0 and values [0.5, 1.0, -3.0]; tau must be"),
        ([0.5, 1.0, 2.5], "has tau 2.5"),
        ([0.5, 1.0, np.nan], "has tau nan"),
        ([0.5, 1.0, 2.0**53], "has tau 9007199254740992.0"),
        ([0.5, 0.0, 0.0], "or 0 with every value 0 (a feature not stored)"),
        ([0.5, 1.0, 401.0], "the footer's t 400 is before step 401, at which a row says"),
    ],
)
def test_a_budgets_row_that_no_model_holds_is_refused(row: list[float], message: str) -> None:
    footer = replace(BUDGET_FOOTER, features_tracked=1)
    with pytest.raises(SnapshotError, match=re.escape(message)):
        read(budget_file(np.array([row]), footer))


#: A model with the base-rate prior (issue 50): its counts and calibration sums in the footer.
PRIOR = replace(BLOOM, admission="all", base_rate="decay:1000")


def test_the_base_rate_and_the_calibration_sums_round_trip() -> None:
    footer = replace(
        EMPTY,
        base_clicks=0.1 + 0.2,
        base_examples=12.5,
        predicted_sum="3.25",
        label_sum="4",
        recent_predicted="1.5",
        recent_labels="2",
    )
    writer = Writer()
    blob = writer.start(PRIOR) + writer.finish(footer)
    items, got = read(blob, piece=7)
    assert got == footer and items[0] == PRIOR
    assert sections(blob, 2)[b"F"]["base_clicks"] == 0.1 + 0.2  # repr-exact


def test_a_file_without_the_prior_reads_as_off_with_no_counts() -> None:
    # As files written before the prior existed, and as the writer writes a model without.
    _, got = read(bloom_file(NO_ROWS, replace(BLOOM, admission="all")))
    assert (got.base_clicks, got.base_examples, got.predicted_sum) == (0.0, 0.0, "")
    writer = Writer()
    blob = writer.start(replace(PRIOR, base_rate="off")) + writer.finish(EMPTY)
    assert "base_rate" not in sections(blob, 2)[b"H"]
    assert not {"base_clicks", "predicted_sum"} & set(sections(blob, 2)[b"F"])
    items, _ = read(blob)
    assert isinstance(items[0], Header) and items[0].base_rate == "off"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"base_clicks": 3.0, "base_examples": 2.0}, "0 <= clicks <= examples"),
        ({"base_clicks": -1.0, "base_examples": 2.0}, "0 <= clicks <= examples"),
        ({"base_clicks": "1"}, "base_clicks"),
        ({"base_examples": True}, "base_examples"),
        ({"base_examples": float("inf")}, "base_examples"),
        ({"predicted_sum": "-1"}, "predicted_sum"),
        ({"label_sum": "nan"}, "label_sum"),
        ({"label_sum": 4}, "label_sum"),
        ({"recent_labels": "-2"}, "recent_labels"),
    ],
)
def test_base_rate_counts_a_model_cannot_have_are_refused(
    fields: dict[str, object], named: str
) -> None:
    blob = bloom_file({**NO_ROWS, **fields}, replace(BLOOM, admission="all"))
    with pytest.raises(SnapshotError, match=re.escape(named)):
        read(blob)


def test_a_header_with_a_bad_base_rate_is_refused() -> None:
    blob = bloom_file(NO_ROWS, replace(BLOOM, admission="all", base_rate="decay:0"))
    with pytest.raises(SnapshotError, match="base-rate prior must be"):
        read(blob)
