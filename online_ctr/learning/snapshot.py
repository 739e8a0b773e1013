"""The snapshot file: one model (spec, every tracked feature's state, step and counters) in one
versioned, checksummed file, written and read as a stream. Pure: bytes in, bytes out, no I/O.

Layout, little-endian throughout::

    b"OCTRSNAP" | u32 version
    b"H" | u32 length | u32 crc32 | header JSON   (rule, params, hash_bits, fields, origin)
    b"R" | u32 count  | u32 crc32 | u64 ids[count] | f64 state[count][width]   (0 or more)
    b"A" | u32 length | u32 crc32 | zlib of the admission counters   (bloom admission only)
    b"F" | u32 length | u32 crc32 | footer JSON   (t, logloss_sum, counts, rows, budget marks,
                                                    admissions per halving period)
    b"E" | sha256 of every byte before the b"E"

Rows are written as they are read, and a later row of an id replaces an earlier one: an export
taken while the model learns writes what it scanned, then the commits it must roll forward
(:mod:`online_ctr.store.snapshot_export`). The footer comes last because only then are the step
and counters known. Each section has a CRC32 (a damaged chunk is named), the whole file a
SHA-256 (a truncated or spliced file is caught). A reader holds at most one section in memory.

A model that expires features (``expire_after`` in the header,
:mod:`online_ctr.learning.retention`) has one more column, ``tau``: the step of the example
that last touched the feature. Its commits delete features, so its file can say so: a row
whose ``tau`` is 0, every value 0, is a feature not stored (it replaces an earlier row of the
id like any later row). The footer then counts the features the model found expired.

A model with a feature budget (``max_features`` in the header,
:mod:`online_ctr.learning.eviction`) has the ``tau`` column too, read the same way. Its rows
are what was stored, and a stored row may be of a feature the budget evicted already (the
learner deletes those when it suits it: ``features_tracked`` counts them too); only the
footer, written last, knows which: it carries the budget's marks at its step (the features
held ``features_held``, ``features_evicted``, the cutoffs ``cut_zero`` and ``cut_all``, the
oldest bin kept ``budget_lowest``), and a row is of a feature held unless its ``tau`` is at
most ``cut_all``, or at most ``cut_zero`` with its weight at ``tau`` zero
(:func:`online_ctr.learning.eviction.held`). The budget's counts are not written: they are a
function of the rows held and those marks, which an import rebuilds them from.

A model with a counting Bloom filter of admission (``bloom:N[:D]`` in the header,
:mod:`online_ctr.learning.admission`) has its counters in the ``A`` section, and its footer
the features the filter admitted in each of the last :data:`PERIODS` halving periods,
``admitted_recent`` (:attr:`online_ctr.learning.admission.Admitting.recent`: period ``k`` at
``k % PERIODS``), from which the features waiting for admission are estimated
(:func:`online_ctr.learning.admission.features_pending`). Absent (files written before it
existed, or none admitted): zeros.

A model's base-rate prior (``base_rate`` in the header, :mod:`online_ctr.learning.base_rate`;
absent: ``off``, as every model before it) is part of its state: the footer carries its counts
``base_clicks`` and ``base_examples`` (absent: 0), and the weighted sums of the predictions
and labels learned, ``predicted_sum`` and ``label_sum``, and over the recent window,
``recent_predicted`` and ``recent_labels``, as Redis kept them (absent: none).

A file is read as untrusted: a checksum proves only that the file is what its writer wrote.
So every field is checked against what a model can hold (a rule and its hyper-parameters, a
state encoding it may use, every state row one that learning produces, steps and counts whole
numbers below 2^53, a finite log-loss sum >= 0), and what is not is named.

>>> header = Header("ftrl", {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}, None, ("z", "n"))
>>> writer = Writer()
>>> blob = writer.start(header) + writer.rows(np.array([7], np.uint64), np.ones((1, 2)))
>>> blob += writer.finish(Footer(t=3, logloss_sum=1.5, nonzero_weights=1, features_tracked=1))
>>> reader = Reader()
>>> items = reader.feed(blob)
>>> reader.close().t, [type(item).__name__ for item in items]
(3, ['Header', 'RowChunk', 'Footer'])

A budget's file: the row of tau 2, its weight zero there, is at or below ``cut_zero``, so
stored but evicted; the other is held.

>>> budgeted = Header("ftrl", header.params, None, ("z", "n"), max_features=1)
>>> writer = Writer()
>>> state = np.array([[0.5, 1.0, 2.0], [-9.0, 4.0, 70.0]])  # z, n, tau
>>> blob = writer.start(budgeted) + writer.rows(np.array([7, 8], np.uint64), state)
>>> footer = Footer(t=70, logloss_sum=9.0, nonzero_weights=1, features_tracked=2,
...                 features_held=1, features_evicted=1, cut_zero=64, budget_lowest=1)
>>> blob += writer.finish(footer)
>>> reader = Reader()
>>> _, chunk, read = reader.feed(blob)
>>> rule = get_rule("ftrl")
>>> fields, tau = chunk.state[:, :2], chunk.state[:, 2]
>>> zero = rule.weights(fields, tau, rule.params_type(**header.params)) == 0
>>> eviction.held(tau, zero, read.marks()).tolist()
[False, True]
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import zlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning import eviction, retention
from online_ctr.learning.admission import COUNTERS, PERIODS, Admission
from online_ctr.learning.base_rate import BaseRate, check_state
from online_ctr.learning.calibration import CALIBRATIONS
from online_ctr.learning.compact import ENCODINGS, check_encoding
from online_ctr.learning.crosses import crosses_text, parse_crosses
from online_ctr.learning.numeric import NUMERIC_HANDLINGS
from online_ctr.learning.retention import NEVER
from online_ctr.learning.rules import get_rule
from online_ctr.learning.rules.base import MAX_STEP, Array, Rule

MAGIC = b"OCTRSNAP"
VERSION = 1
PREAMBLE = struct.Struct("<8sI")
SECTION = struct.Struct("<cII")
#: Most rows per chunk, and longest JSON section: what a reader may have to hold at once.
MAX_ROWS = 1 << 16
MAX_JSON_BYTES = 1 << 20
DIGEST_BYTES = 32
#: How a span's refusal names the header's two settings, and a budget's.
SPAN_NAMES = ("the header's expire_after", "the header's encoding")
BUDGET_NAMES = ("the header's max_features", "the header's encoding")
#: The footer's marks of a feature budget (absent: 0, as for a model without one).
BUDGET_MARKS = ("features_held", "features_evicted", "cut_zero", "cut_all", "budget_lowest")
#: The footer's admissions per halving period of a model without any (absent: these).
NONE_ADMITTED = (0,) * PERIODS
#: The footer's fields of the base-rate prior and the calibration sums (absent: 0 or none).
OPTIONAL_FOOTER = (
    "base_clicks", "base_examples", "predicted_sum", "label_sum", "recent_predicted",
    "recent_labels",
)  # fmt: skip


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
    admission: str = "all"
    #: The span after which an untouched feature is gone (0: never; absent from files
    #: written before it existed). With a span, each row ends with ``tau``.
    expire_after: int = 0
    #: The most features the model holds (0: no budget; absent from files written before
    #: budgets existed). With a budget, each row ends with ``tau`` too.
    max_features: int = eviction.UNBOUNDED
    #: The base-rate prior (absent from files written before it existed: ``off``).
    base_rate: str = "off"
    #: The pairs of fields the model crosses, ``a&b,c&d`` (:mod:`online_ctr.learning.
    #: crosses`; "": none, as files written before crosses existed).
    crosses: str = ""

    @property
    def stepped(self) -> bool:
        """Whether each row ends with its feature's last step ``tau``."""
        return self.expire_after != NEVER or self.max_features != eviction.UNBOUNDED

    @property
    def width(self) -> int:
        return len(self.fields) + self.stepped


@dataclass(frozen=True)
class AdmissionCounters:
    """A model's counting Bloom filter of feature admission, as its last commit left it."""

    counters: bytes


@dataclass(frozen=True)
class RowChunk:
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
    #: The learned importance weights less 1, summed, as Redis kept it ('': none learned a
    #: weight other than 1); the progressive log loss is ``logloss_sum / (t + weight_excess)``.
    weight_excess: str = ""
    #: How many times the model found a feature expired (its meta's ``expired``).
    features_expired: int = 0
    #: A feature budget's marks at ``t`` (all 0 without one): the features it holds (of
    #: ``features_tracked``, the others are evicted rows still stored), those it evicted so
    #: far, its cutoffs of zero weights and of all features (steps), its oldest bin kept.
    features_held: int = 0
    features_evicted: int = 0
    cut_zero: int = 0
    cut_all: int = 0
    budget_lowest: int = 0
    #: A counting filter's admissions in each of the last :data:`PERIODS` halving periods,
    #: period ``k`` at ``k % PERIODS`` (all 0 without a filter, or none admitted): the
    #: meta's ``admitted_recent``.
    admitted_recent: tuple[int, ...] = NONE_ADMITTED
    #: The base rate's counts at ``t`` (:mod:`online_ctr.learning.base_rate`).
    base_clicks: float = 0.0
    base_examples: float = 0.0
    #: The importance-weighted sums of the predictions and labels learned, as Redis kept
    #: them ('': none written).
    predicted_sum: str = ""
    label_sum: str = ""
    #: The same over the recent window, as the last commit wrote them ('': none).
    recent_predicted: str = ""
    recent_labels: str = ""

    def marks(self) -> NDArray[np.int64]:
        """The budget's marks as :attr:`online_ctr.learning.eviction.Evicting.marks` holds
        them."""
        marks = np.zeros(5, np.int64)
        marks[eviction.LOWEST], marks[eviction.TRACKED] = self.budget_lowest, self.features_held
        marks[eviction.EVICTED] = self.features_evicted
        marks[eviction.CUT_ZERO], marks[eviction.CUT_ALL] = self.cut_zero, self.cut_all
        return marks


Item = Header | RowChunk | AdmissionCounters | Footer
#: Longest compressed admission counters a reader accepts (4 MiB of counters, incompressible).
MAX_COUNTER_BYTES = COUNTERS + COUNTERS // 1000 + 64


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


def parse_header(payload: bytes) -> Header:
    """The header section's JSON as a :class:`Header`, checked against the rule it names."""
    body = _load(payload, "header")
    try:
        header = Header(
            rule=str(body["rule"]),
            params={str(k): _number(k, v) for k, v in body["params"].items()},
            hash_bits=_hash_bits(body["hash_bits"]),
            fields=tuple(str(f) for f in body["fields"]),
            origin=str(body.get("origin", "")),
            source=dict(body.get("source") or {}),
            encoding=_choice(body, "encoding", ENCODINGS),
            numeric=_choice(body, "numeric", NUMERIC_HANDLINGS),
            calibration=_choice(body, "calibration", CALIBRATIONS),
            admission=Admission.parse(str(body.get("admission", "all"))).text,
            expire_after=_span(body.get("expire_after", NEVER)),
            max_features=_budget(body.get("max_features", eviction.UNBOUNDED)),
            base_rate=BaseRate.parse(str(body.get("base_rate", "off"))).text,
            crosses=crosses_text(parse_crosses(str(body.get("crosses", "")))),
        )
        rule = get_rule(header.rule)
        rule.params_type(**header.params)
        check_encoding(header.encoding, header.rule)
        retention.check_encoding(header.expire_after, header.encoding, SPAN_NAMES)
        retention.check_encoding(header.max_features, header.encoding, BUDGET_NAMES)
        if header.expire_after and header.max_features:
            raise SnapshotError(
                f"the header has expire_after {header.expire_after} and max_features "
                f"{header.max_features}: a model has one or the other"
            )
    except SnapshotError:
        raise
    except KeyError as error:
        raise SnapshotError(f"the header has no {error} field") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise SnapshotError(f"the header is not a valid model description: {error}") from None
    if header.fields != rule.fields:
        raise SnapshotError(
            f"the header's state fields {list(header.fields)} are not rule "
            f"{rule.name!r}'s {list(rule.fields)}"
        )
    return header


def parse_footer(payload: bytes) -> Footer:
    """The footer section's JSON as a :class:`Footer`: a step, counts and a log-loss sum
    that a model can have."""
    body = _load(payload, "footer")
    try:
        footer = Footer(
            t=_whole(body, "t", "a step"),
            logloss_sum=_logloss(body["logloss_sum"]),
            nonzero_weights=_whole(body, "nonzero_weights", "a count"),
            features_tracked=_whole(body, "features_tracked", "a count"),
            rows=_whole(body, "rows", "a count"),
            source=dict(body.get("source") or {}),
            logloss_text=_logloss_text(body.get("logloss_text")),
            weight_excess=_weight_excess(body.get("weight_excess")),
            features_expired=_whole(body, "features_expired", "a count", 0),
            features_held=_whole(body, "features_held", "a count", 0),
            features_evicted=_whole(body, "features_evicted", "a count", 0),
            cut_zero=_whole(body, "cut_zero", "a step", 0),
            cut_all=_whole(body, "cut_all", "a step", 0),
            budget_lowest=_whole(body, "budget_lowest", "a bin", 0),
            admitted_recent=_admitted(body.get("admitted_recent", NONE_ADMITTED)),
            base_clicks=_float(body, "base_clicks"),
            base_examples=_float(body, "base_examples"),
            predicted_sum=_sum_text(body, "predicted_sum"),
            label_sum=_sum_text(body, "label_sum"),
            recent_predicted=_sum_text(body, "recent_predicted"),
            recent_labels=_sum_text(body, "recent_labels"),
        )
        check_state(footer.base_clicks, footer.base_examples)
    except SnapshotError:
        raise
    except KeyError as error:
        raise SnapshotError(f"the footer has no {error} field") from None
    except (TypeError, ValueError) as error:
        raise SnapshotError(f"the footer is not valid: {error}") from None
    _check_counts(footer)
    _check_cutoffs(footer)
    return footer


def _shown(value: object) -> str:
    """A value as a message shows it: a file's values may be of any length."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _number(name: object, value: object) -> float:
    """A hyper-parameter as written: an int stays one (a period ``k`` is compared as such)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"hyper-parameter {value!r} is not a number")
    if value != value:  # NaN passes no check of the rules' own (every comparison is False)
        raise ValueError(f"hyper-parameter {name} is NaN")
    return value


def _hash_bits(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise SnapshotError(f"the header's hash_bits {_shown(value)} is not in 1..64 (or null)")
    return value


def _choice(body: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    """One of a stored setting's values; absent, its first (what models had before it)."""
    value = body.get(key, choices[0])
    if value not in choices:
        raise SnapshotError(
            f"the header's {key} {_shown(value)} is not one of {', '.join(choices)}"
        )
    return str(value)


def _whole(body: dict[str, Any], key: str, what: str, absent: int | None = None) -> int:
    """A step or a count: a whole number that a float64 (Lua's numbers) holds exactly
    (``absent``: its value when the footer has none, else it must have one)."""
    value = body[key] if absent is None else body.get(key, absent)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_STEP:
        raise SnapshotError(
            f"the footer's {key} {_shown(value)} is not {what}: it must be a whole number in "
            "0..2^53"
        )
    return value


def _admitted(value: object) -> tuple[int, ...]:
    """The footer's ``admitted_recent``: :data:`PERIODS` counts, each a whole number that a
    float64 holds exactly (as :func:`_whole`)."""
    if (
        not isinstance(value, list | tuple)
        or len(value) != PERIODS
        or not all(
            isinstance(count, int) and not isinstance(count, bool) and 0 <= count < MAX_STEP
            for count in value
        )
    ):
        raise SnapshotError(
            f"the footer's admitted_recent {_shown(value)} is not the features admitted in "
            f"each of {PERIODS} halving periods: it must be a list of {PERIODS} whole numbers "
            "in 0..2^53"
        )
    return tuple(value)


def _span(value: object) -> int:
    """The header's ``expire_after``: a span a model can have."""
    try:
        return retention.check_expire_after(value)  # type: ignore[arg-type]
    except ValueError as error:
        raise SnapshotError(f"the header's {error}") from None


def _budget(value: object) -> int:
    """The header's ``max_features``: a budget a model can have."""
    try:
        return eviction.check_max_features(value)  # type: ignore[arg-type]
    except ValueError as error:
        raise SnapshotError(f"the header's {error}") from None


def _logloss(value: object) -> float:
    """A sum of log losses: finite and >= 0 (Redis adds to it; NaN or inf poison every sum)."""
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an int beyond any float
            number = math.inf
    if not 0 <= number < math.inf:
        raise SnapshotError(
            f"the footer's logloss_sum {_shown(value)} is not a sum of log losses: it must be "
            "a finite number >= 0"
        )
    return number


def _logloss_text(value: object) -> str:
    """``logloss_sum``'s digits as Redis kept them, if given (checked against it later)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > 40:
        raise SnapshotError(f"the footer's logloss_text {_shown(value)} is not a number")
    return value


def _float(body: dict[str, Any], name: str) -> float:
    """A float of the footer (absent: 0.0), finite."""
    value = body.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SnapshotError(f"the footer's {name} {_shown(value)} is not a finite number")
    return float(value)


def _sum_text(body: dict[str, Any], name: str) -> str:
    """A sum of the footer as Redis kept it, if given: a finite number >= 0, as text."""
    value = body.get(name, "")
    if value == "":
        return ""
    try:
        valid = isinstance(value, str) and len(value) <= 40 and 0 <= float(value) < math.inf
    except ValueError:
        valid = False
    if not valid:
        raise SnapshotError(f"the footer's {name} {_shown(value)} is not a finite number >= 0")
    return str(value)


def _weight_excess(value: object) -> str:
    """The learned weights' excess over 1, as Redis kept it, if given: a finite number."""
    if value is None or value == "":
        return ""
    try:
        finite = isinstance(value, str) and len(value) <= 40 and math.isfinite(float(value))
    except ValueError:
        finite = False
    if not finite:
        raise SnapshotError(f"the footer's weight_excess {_shown(value)} is not a finite number")
    return str(value)


def _counters(payload: bytes) -> bytes:
    """The admission counters of a section's payload: at most :data:`COUNTERS` bytes."""
    try:
        counters = zlib.decompressobj().decompress(payload, COUNTERS + 1)
    except zlib.error as error:
        raise SnapshotError(f"the admission counters do not decompress: {error}") from None
    if len(counters) > COUNTERS:
        raise SnapshotError(f"the admission counters hold more than {COUNTERS} bytes")
    return counters


def _check_counts(footer: Footer) -> None:
    """The counts and the log-loss text agree with one another."""
    if footer.logloss_text:
        try:
            same = float(footer.logloss_text) == footer.logloss_sum
        except ValueError:
            same = False
        if not same:
            raise SnapshotError(
                f"the footer's logloss_text {_shown(footer.logloss_text)} is not its "
                f"logloss_sum {footer.logloss_sum!r}"
            )
    if not footer.nonzero_weights <= footer.features_tracked <= footer.rows:
        raise SnapshotError(
            f"the footer counts {footer.nonzero_weights} nonzero weights, "
            f"{footer.features_tracked} features and {footer.rows} rows: a feature is counted "
            "once at most, a nonzero weight is a feature's, and a feature has a row"
        )


def _check_cutoffs(footer: Footer) -> None:
    """The budget's cutoffs are steps it has reached, that of zero weights at least that of
    all (every zero weight at or below the cutoff of all is evicted too)."""
    if not footer.cut_all <= footer.cut_zero <= footer.t:
        raise SnapshotError(
            f"the footer's cut_all {footer.cut_all}, cut_zero {footer.cut_zero} and t "
            f"{footer.t} are not cutoffs a budget has: cut_all <= cut_zero <= t"
        )


def _check_budget(footer: Footer) -> None:
    """The budget's features held are some of those stored, and have the nonzero weights;
    its oldest bin kept is one of its window at step ``t``: not after ``t``'s, and not so old
    that ``t``'s would share its slot (the learner merges older bins into the next as the
    window moves on), or the counts rebuilt from it would mix two bins."""
    if not footer.nonzero_weights <= footer.features_held <= footer.features_tracked:
        raise SnapshotError(
            f"the footer counts {footer.nonzero_weights} nonzero weights, "
            f"{footer.features_held} features held and {footer.features_tracked} stored: a "
            "budget holds some of the features stored, and a nonzero weight is a feature's "
            "it holds"
        )
    current = (footer.t - 1) // eviction.BIN_EXAMPLES if footer.t else 0
    oldest = max(0, current - eviction.WINDOW_BINS + 1)
    if not oldest <= footer.budget_lowest <= current:
        raise SnapshotError(
            f"the footer's budget_lowest {footer.budget_lowest} is not a bin a budget keeps at "
            f"step {footer.t}: it must be in {oldest}..{current} (bins of "
            f"{eviction.BIN_EXAMPLES} examples, {eviction.WINDOW_BINS} kept)"
        )


def _check_no_budget(footer: Footer) -> None:
    """A model without a budget has no budget marks (an import would drop them unseen)."""
    for mark in BUDGET_MARKS:
        if getattr(footer, mark):
            raise SnapshotError(
                f"the footer's {mark} {getattr(footer, mark)} is a feature budget's, and the "
                "header has no max_features"
            )


def _check_no_filter(footer: Footer) -> None:
    """A model without a counting filter admitted nothing through one (an import would drop
    the counts unseen)."""
    if any(footer.admitted_recent):
        raise SnapshotError(
            f"the footer's admitted_recent {list(footer.admitted_recent)} is a counting "
            "filter's, and the header's admission is not bloom"
        )


def _load(payload: bytes, what: str) -> dict[str, Any]:
    try:
        body = json.loads(payload)
    except ValueError:
        raise SnapshotError(f"the {what} is not JSON") from None
    except RecursionError:  # a section may nest arrays until the parser's stack runs out
        raise SnapshotError(f"the {what} nests too deeply to be a {what}") from None
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
        if self.header.max_features:
            _check_budget(footer)
        else:
            _check_no_budget(footer)
        if not Admission.parse(self.header.admission).counted:
            _check_no_filter(footer)
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
