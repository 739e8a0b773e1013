"""What the client returns: frozen dataclasses mirroring the service's response bodies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: A feature value: a category (``str``), a finite number, or several categories.
FeatureValue = str | float | Sequence[str]
#: One example's features, ``field -> value``.
FeatureMap = Mapping[str, FeatureValue]


@dataclass(frozen=True)
class Term:
    """One feature's part of a logit: ``contribution = weight * x``. ``feature`` is named as
    the model saw it (``field=value``; a number's ``field=bucket``, or ``field`` when numbers
    are raw), ``number`` the number sent for it (None for a category)."""

    feature: str
    x: float
    weight: float
    contribution: float
    number: float | None = None


@dataclass(frozen=True)
class Explanation:
    """A logit in parts, before any calibration: ``bias + base_rate + sum of the features'
    contributions + rest`` is the logit; ``features`` holds the largest by magnitude, largest
    first, ``rest`` sums the ``omitted`` others, and ``base_rate`` is the model's base-rate
    prior (0 for a model without one)."""

    bias: float
    features: tuple[Term, ...]
    rest: float
    omitted: int
    base_rate: float = 0.0


@dataclass(frozen=True)
class Prediction:
    """The click probability of one example, its logit, and the model that scored it; with
    ``explain=True``, the logit's :class:`Explanation`; with ``uncertainty=True``, its
    uncertainty ``sum_i |x_i| eta_i`` (McMahan et al. 2013: large for features seen rarely)."""

    probability: float
    logit: float
    model: str
    explanation: Explanation | None = None
    uncertainty: float | None = None


@dataclass(frozen=True)
class Accepted:
    """How many examples the service accepted into the model's feedback stream.

    ``replayed`` is true when a request was answered as a retry of one already accepted
    (its ``Idempotency-Key`` was known), so its examples were not appended again.
    """

    accepted: int
    replayed: bool = False


@dataclass(frozen=True)
class ModelInfo:
    """A model's rule, hyper-parameters and progress, as ``GET /models/{name}`` reports."""

    name: str
    rule: str
    params: Mapping[str, float] = field(hash=False)
    hash_bits: int
    global_step: int
    nonzero_weights: int
    features_tracked: int
    progressive_logloss: float | None
    stream_lag: int
    dead_letters: int
    #: Which new features get state, the share of non-clicks kept (each weighted 1/rate),
    #: and the learned examples' total weight (``global_step`` when none had a weight).
    admission: str = "all"
    negative_rate: float = 1.0
    learned_weight: float = 0.0
    #: Features untouched for this many examples are deleted (0: never), and how many times
    #: one was.
    expire_after: int = 0
    features_expired: int = 0
    #: The most features held (0: no budget), and how many the budget has evicted.
    max_features: int = 0
    features_evicted: int = 0
    #: With a budget, the features it holds (the others tracked are evicted, not deleted yet).
    features_held: int = 0
    #: With bloom admission, an estimate of the features waiting for admission (else None).
    features_pending_admission: int | None = None
    #: Redis memory its feature state takes, in bytes (0 from a service before it was reported).
    state_bytes: int = 0
    #: The base-rate prior ("off" from a service before it existed), what it adds to the next
    #: logit, and the click rate it follows (None before any example).
    base_rate: str = "off"
    base_rate_logit: float = 0.0
    click_rate: float | None = None
    #: sum(p) / sum(y) over every example learned, and over the recent window (None before a
    #: click).
    calibration_ratio: float | None = None
    recent_calibration_ratio: float | None = None


@dataclass(frozen=True)
class ModelDeleted:
    """What ``DELETE /models/{name}`` removed."""

    name: str
    keys_deleted: int


@dataclass(frozen=True)
class ModelImported:
    """The model ``PUT /models/{name}/snapshot`` created from a snapshot file."""

    name: str
    rule: str
    global_step: int
    features_tracked: int
    nonzero_weights: int
    rows: int
