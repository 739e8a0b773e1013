"""Feature admission: a new feature gets state only once admitted (McMahan et al. 2013,
section 4.1, "Probabilistic Feature Inclusion").

Most features of a CTR stream are seen once or a few times, and a model that keeps state for
each of them spends most of its memory on weights that stay zero. Until a feature is admitted
it contributes 0 to every prediction and its gradient is dropped; once admitted it is learned
as any other. The bias is always admitted. Two rules:

- **Poisson inclusion** (``poisson:P``): at each occurrence a feature not yet admitted is
  admitted with probability ``P``, so it waits about ``1 / P`` occurrences. The draw is a hash
  of the feature's id and the example's step, never a random generator: the service, a
  retried group and ``online-ctr replay`` all draw the same.
- **Counting Bloom filter inclusion** (``bloom:N``): occurrences of features not yet
  admitted are counted in a counting Bloom filter (``COUNTERS`` one-byte counters, ``HASHES``
  counters per feature, each saturating at 255); a feature is admitted at the occurrence that
  brings the least of its counters to ``N``, its ``N``-th, or earlier where other features
  share its counters. The counters are updated in stream order and committed with the state,
  so the service equals ``replay`` at any batch size, and a learner that takes over loses no
  count.
- **Forgetting** (``bloom:N:D``): every ``D`` examples (after ``D``, ``2D``, ... examples, at
  fixed positions of the stream) every counter is halved, rounded down. Without it the
  filter only fills: under churn (new ids arriving all the time, old ones never seen again)
  its counters end up all taken, and every new feature is admitted at once, as with ``all``.
  Halved, a count of 1 is gone at the next halving, so a feature must recur within about
  ``D`` examples to be admitted; choose ``D`` so that the distinct new features of ``D``
  examples stay well below ``COUNTERS / HASHES``.

The compiled loop (:mod:`online_ctr.learning.kernels`) applies the rule example by example;
this module holds its parameters and the hashes it uses.

>>> Admission.parse("poisson:0.03"), Admission.parse("bloom:2").text
(Admission(kind='poisson', p=0.03, n=1, halve_every=0), 'bloom:2')
>>> Admission.parse("bloom:2:20000").halve_every, Admission.parse("bloom:2:20000").text
(20000, 'bloom:2:20000')
>>> Admission.parse("bloom:0")
Traceback (most recent call last):
...
ValueError: admission 'bloom:0': the count must be a whole number from 1 to 255
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.rules.base import MAX_STEP
from online_ctr.learning.splitmix import mix, uniform

#: Counters of a model's counting Bloom filter: 4 MiB, one byte each. With ``HASHES`` = 3, m
#: features waiting for admission at once leave a new feature's counters all taken (so it is
#: admitted early) with probability (1 - e^(-3m / 2^22))^3, the Bloom filter's false-positive
#: rate: 0.13 at m = 1M, 0.007 at m = 300k (computed, not measured).
COUNTERS = 1 << 22
HASHES = 3
#: A counter's most: counts saturate there, so ``N`` can be at most this.
MOST_COUNT = 255
#: Halving periods whose admissions a model keeps counting (:func:`features_pending`): a
#: count of at most ``MOST_COUNT`` is gone after at most 8 halvings.
PERIODS = 8
#: The longest period of halving, in examples: steps are exact below 2^53.
MOST_PERIOD = 1 << 52

Kind = Literal["all", "poisson", "bloom"]

#: The forms :meth:`Admission.text` writes, as a JSON Schema pattern (for the API's schema).
PATTERN = (
    r"^(all|poisson:(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?|[1-9](\.[0-9]+)?e-[0-9]+)"
    r"|bloom:([1-9][0-9]?|1[0-9][0-9]|2[0-4][0-9]|25[0-5])(:[1-9][0-9]{0,15})?)$"
)
#: The kernel's code of each kind.
MODES: dict[str, int] = {"all": 0, "poisson": 1, "bloom": 2}

#: Salts, so that neither hash is another one of the service's (compact rounding, sampling).
POISSON_SALT = 0x61646D6974  # "admit"
BLOOM_SALTS = (0x626C6F6F6D31, 0x626C6F6F6D32, 0x626C6F6F6D33)  # "bloom1".."bloom3"


@dataclass(frozen=True)
class Admission:
    """Which features get state: ``all`` (every one, at once), ``poisson`` with probability
    ``p`` per occurrence, ``bloom`` at the ``n``-th occurrence, its counts halved every
    ``halve_every`` examples (0: never)."""

    kind: Kind = "all"
    p: float = 1.0
    n: int = 1
    halve_every: int = 0

    @classmethod
    def parse(cls, text: str) -> Admission:
        """``all``, ``poisson:P`` (0 < P <= 1), ``bloom:N`` (1 <= N <= 255) or ``bloom:N:D``
        (counts halved every D examples, 1 <= D <= 2^52)."""
        kind, _, value = text.partition(":")
        if kind == "bloom":
            return cls._bloom(text, value)
        try:
            if kind == "all" and not value:
                return cls()
            if kind == "poisson":
                p = float(value)
                if not 0.0 < p <= 1.0 or not math.isfinite(p):
                    raise ValueError
                return cls("poisson", p=p)
        except ValueError:
            raise ValueError(
                f"admission {text!r}: the probability must be above 0 and at most 1"
            ) from None
        raise ValueError(
            f"admission {text!r}: use all, poisson:P (0 < P <= 1), bloom:N or bloom:N:D"
        )

    @classmethod
    def _bloom(cls, text: str, value: str) -> Admission:
        """``N`` or ``N:D`` of ``bloom:``."""
        count, colon, period = value.partition(":")
        if not (count.isdigit() and 1 <= int(count) <= MOST_COUNT):
            raise ValueError(
                f"admission {text!r}: the count must be a whole number from 1 to {MOST_COUNT}"
            )
        if not colon:
            return cls("bloom", n=int(count))
        if not (period.isdigit() and 1 <= int(period) <= MOST_PERIOD):
            raise ValueError(
                f"admission {text!r}: the period D of bloom:N:D must be a whole number of "
                "examples from 1 to 2^52"
            )
        return cls("bloom", n=int(count), halve_every=int(period))

    @property
    def text(self) -> str:
        """The form :meth:`parse` reads."""
        if self.kind == "poisson":
            return f"poisson:{self.p!r}"
        if self.kind != "bloom":
            return "all"
        return f"bloom:{self.n}:{self.halve_every}" if self.halve_every else f"bloom:{self.n}"

    @property
    def counted(self) -> bool:
        """Whether occurrences are counted (a counting Bloom filter)."""
        return self.kind == "bloom"


#: Every feature admitted at once: what a model without an admission rule does.
ADMIT_ALL = Admission()


def bloom_positions(ids: NDArray[np.uint64]) -> NDArray[np.int64]:
    """Each id's ``HASHES`` counters, shape ``(len(ids), HASHES)``."""
    ids = np.asarray(ids, np.uint64)
    if not len(ids):
        return np.zeros((0, HASHES), np.int64)
    columns = [mix(ids ^ np.uint64(salt)) % np.uint64(COUNTERS) for salt in BLOOM_SALTS]
    return np.stack(columns, axis=1).astype(np.int64)


def poisson_uniform(ids: NDArray[np.uint64], steps: NDArray[np.int64]) -> NDArray[np.float64]:
    """The uniform number in [0, 1) the Poisson rule compares with ``p`` for an occurrence of
    each id at each step (the step the occurrence's update is learned as); what the kernel
    computes, written in numpy for the tests."""
    salted = np.asarray(steps, np.int64).astype(np.uint64) ^ np.uint64(POISSON_SALT)
    return uniform(mix(np.asarray(ids, np.uint64) ^ mix(salted)))


class Admitting(NamedTuple):
    """The admission argument of the compiled learner
    (:func:`online_ctr.learning.kernels.learner`), per feature row of a batch where it says
    so; the learner updates ``admitted``, ``counters`` and ``dropped`` in place."""

    #: :data:`MODES`' code of the rule (0: every feature is admitted, nothing else is read).
    mode: int
    p: float
    n: int
    #: Per row, 1 if the feature is admitted.
    admitted: NDArray[np.uint8]
    #: The counting Bloom filter (bloom), or the part of it the rows use.
    counters: NDArray[np.uint8]
    #: Per row, its ``HASHES`` counters in ``counters``.
    positions: NDArray[np.int64]
    #: One count: the occurrences whose gradient was dropped.
    dropped: NDArray[np.int64]
    #: Features the filter admitted in each of the last :data:`PERIODS` halving periods,
    #: period ``k`` (examples ``k * halve_every + 1 ..``) at ``k % PERIODS``; all in slot 0
    #: without halving (:func:`features_pending`).
    recent: NDArray[np.int64]
    #: Every counter is halved after every this many examples of the stream (0: never).
    halve_every: int = 0

    def admitted_rows(self) -> NDArray[np.bool_]:
        """Which rows are admitted (after the learner ran: it admits as it goes)."""
        if self.mode == 0:
            return np.ones(len(self.positions), np.bool_)
        admitted: NDArray[np.bool_] = self.admitted == 1
        return admitted

    def dropped_count(self) -> int:
        """How many occurrences' gradients the learner dropped, features not admitted."""
        return int(self.dropped[0])


def admit_all(rows: int = 0) -> Admitting:
    """The admission argument that admits every one of ``rows`` features."""
    none, positions = np.zeros(0, np.uint8), np.zeros((rows, 1), np.int64)
    return Admitting(
        0, 1.0, 1, none, none, positions, np.zeros(1, np.int64), np.zeros(PERIODS, np.int64)
    )


def admitting(
    admission: Admission,
    ids: NDArray[np.uint64],
    admitted: NDArray[np.bool_],
    counters: NDArray[np.uint8] | None,
    recent: NDArray[np.int64] | None = None,
) -> Admitting:
    """The learner's admission argument for the features ``ids`` of a batch, of which
    ``admitted`` are admitted already; ``counters``: the model's filter (``bloom`` only), and
    ``recent``: its admissions per period (:attr:`Admitting.recent`; zeros if None), both
    updated in place as the learner counts."""
    if admission.kind == "all":
        return admit_all(len(ids))
    positions = np.zeros((len(ids), 1), np.int64)
    if admission.counted:
        if counters is None:
            raise ValueError("bloom admission needs the model's counters")
        positions = bloom_positions(ids)
    return Admitting(
        MODES[admission.kind],
        float(admission.p),
        int(admission.n),
        admitted.astype(np.uint8),
        np.zeros(0, np.uint8) if counters is None else counters,
        positions,
        np.zeros(1, np.int64),
        np.zeros(PERIODS, np.int64) if recent is None else recent,
        int(admission.halve_every),
    )


def local_admitting(
    admission: Admission,
    ids: NDArray[np.uint64],
    admitted: NDArray[np.bool_],
    counters: NDArray[np.uint8] | None,
    recent: NDArray[np.int64] | None = None,
) -> tuple[Admitting, NDArray[np.int64]]:
    """:func:`admitting` over a copy of only the counters ``ids`` use and a copy of
    ``recent`` (both left as they are), and where each of the copy's counters is in the
    filter: what a learner whose group may not commit learns with (:func:`changed_counters`
    says what to write if it does)."""
    copied = None if recent is None else recent.copy()
    argument = admitting(admission, ids, admitted, counters, copied)
    if not admission.counted:
        return argument, np.zeros(0, np.int64)
    where, local = np.unique(argument.positions, return_inverse=True)
    positions = local.reshape(argument.positions.shape).astype(np.int64)
    return argument._replace(counters=argument.counters[where], positions=positions), where


def changed_counters(
    argument: Admitting, where: NDArray[np.int64], counters: NDArray[np.uint8] | None
) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
    """The counters of a :func:`local_admitting` run that it changed, and their values."""
    if counters is None or not len(where):
        return np.zeros(0, np.int64), np.zeros(0, np.uint8)
    changed = argument.counters != counters[where]
    return where[changed], argument.counters[changed]


def halvings(t: int, examples: int, halve_every: int) -> int:
    """How many times examples ``t + 1 .. t + examples`` halve the counters: once before each
    example that follows a multiple of ``halve_every`` examples (0: never).

    >>> halvings(0, 10, 4), halvings(4, 1, 4), halvings(5, 3, 4), halvings(0, 10, 0)
    (2, 1, 0, 0)
    """
    if not halve_every:
        return 0
    return (t + examples - 1) // halve_every - max(t - 1, 0) // halve_every


def counters_after(
    argument: Admitting, where: NDArray[np.int64], counters: NDArray[np.uint8], times: int
) -> NDArray[np.uint8]:
    """The whole filter after a :func:`local_admitting` run over a stretch of the stream
    that halved it ``times`` times: each counter the run used as the run left it, every other
    one halved that many times (a copy)."""
    whole = counters >> np.uint8(times) if times < 8 else np.zeros_like(counters)
    whole[where] = argument.counters
    return whole


def empty_counters() -> NDArray[np.uint8]:
    """A counting Bloom filter with nothing counted."""
    return np.zeros(COUNTERS, np.uint8)


class Tally(NamedTuple):
    """What a model keeps of its counting filter besides the counters, for
    :func:`features_pending`: how many counters are above 0, and its admissions per halving
    period (:attr:`Admitting.recent`)."""

    used: int
    recent: NDArray[np.int64]

    @classmethod
    def of(cls, counters: NDArray[np.uint8], recent: NDArray[np.int64] | None = None) -> Tally:
        """The tally of ``counters``, with ``recent`` (none admitted if None)."""
        admitted = np.zeros(PERIODS, np.int64) if recent is None else recent
        return cls(int(np.count_nonzero(counters)), admitted)

    @classmethod
    def parse(cls, used: str | None, recent: str | None) -> Tally:
        """From the texts :meth:`text` writes, the count and then the periods' admissions
        (absent: 0, and none admitted); a ValueError if either is not such a text."""
        count = int(used or 0)
        if count < 0:
            raise ValueError(f"a count of counters used expected, not {used!r}")
        return cls(count, parse_recent(recent))

    def text(self) -> str:
        """The count and the periods' admissions, space-separated (``finalize.lua``'s form)."""
        return " ".join(str(number) for number in (self.used, *self.recent.tolist()))


def parse_recent(text: str | None) -> NDArray[np.int64]:
    """The admissions per halving period as :meth:`Tally.text` writes them, after the count
    (absent or empty: none admitted); a ValueError unless :data:`PERIODS` whole numbers in
    0..2^53.

    >>> parse_recent("0 7 40 10 0 0 0 0").tolist(), parse_recent(None).tolist()
    ([0, 7, 40, 10, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0])
    """
    if not text:
        return np.zeros(PERIODS, np.int64)
    counts = [int(part) for part in text.split()]
    if len(counts) != PERIODS or not all(0 <= count < MAX_STEP for count in counts):
        raise ValueError(f"admissions of {PERIODS} periods expected, not {text!r}")
    return np.array(counts, np.int64)


def features_pending(tally: Tally, admission: Admission, t: int) -> int | None:
    """An estimate of the features waiting for admission (``bloom`` only, else None): met,
    not admitted, and still remembered by the filter whose ``tally`` (its counters above 0,
    and its admissions per period) is as of ``t`` examples.

    The filter holds no ids, so this is estimated. The distinct features whose counters are
    all above 0 are about ``-(m / k) ln(1 - used / m)`` (m counters, k per feature;
    Swamidass and Baldi 2007). They are those waiting and those admitted that the filter
    still remembers: a feature is no longer counted once admitted, so its counters stay at
    ``N`` and are gone after ``N.bit_length()`` halvings; those admitted in as many periods
    are subtracted. Shared counters keep some admitted features a period longer, so this
    errs a little high (within 2% of the exact count on the shared click logs,
    tests/core/test_admission_pending.py); features admitted again after they expired are
    subtracted twice.

    >>> bloom = Admission.parse("bloom:2:100")
    >>> recent = np.zeros(PERIODS, np.int64); recent[[2, 3]] = 40, 10
    >>> features_pending(Tally(3 * 1000, recent), bloom, 350)  # 1000 remembered, 50 admitted
    950
    >>> features_pending(Tally(0, recent), Admission.parse("poisson:0.1"), 350) is None
    True
    """
    if not admission.counted:
        return None
    fill = min(tally.used, COUNTERS - 1) / COUNTERS  # a full filter: the most the estimate says
    remembered = -(COUNTERS / HASHES) * math.log1p(-fill)
    every = admission.halve_every
    current = (t - 1) // every if every and t else 0
    periods = min(admission.n.bit_length() if every else 1, current + 1)
    admitted = sum(int(tally.recent[(current - back) % PERIODS]) for back in range(periods))
    return max(0, round(remembered - admitted))
