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

>>> from online_ctr.learning.snapshot_reader import Reader
>>> from online_ctr.learning.snapshot_writer import Writer
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
>>> from online_ctr.learning.rules import get_rule
>>> rule = get_rule("ftrl")
>>> fields, tau = chunk.state[:, :2], chunk.state[:, 2]
>>> zero = rule.weights(fields, tau, rule.params_type(**header.params)) == 0
>>> eviction.held(tau, zero, read.marks()).tolist()
[False, True]
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning import eviction
from online_ctr.learning.admission import COUNTERS, PERIODS
from online_ctr.learning.retention import NEVER
from online_ctr.learning.rules.base import Array

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


def shown(value: object) -> str:
    """A value as a message shows it: a file's values may be of any length."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def load_section(payload: bytes, what: str) -> dict[str, Any]:
    try:
        body = json.loads(payload)
    except ValueError:
        raise SnapshotError(f"the {what} is not JSON") from None
    except RecursionError:  # a section may nest arrays until the parser's stack runs out
        raise SnapshotError(f"the {what} nests too deeply to be a {what}") from None
    if not isinstance(body, dict):
        raise SnapshotError(f"the {what} is not a JSON object")
    return body
