"""A snapshot's footer (:mod:`online_ctr.learning.snapshot`) read as untrusted: a step,
counts and sums that a model can have, agreeing with one another and with the header's budget
and admission, and what is not is named."""

from __future__ import annotations

import math
from typing import Any

from online_ctr.learning import eviction
from online_ctr.learning.admission import PERIODS, Admission
from online_ctr.learning.base_rate import check_state
from online_ctr.learning.rules.base import MAX_STEP
from online_ctr.learning.snapshot import (
    BUDGET_MARKS,
    NONE_ADMITTED,
    Footer,
    Header,
    SnapshotError,
    load_section,
    shown,
)


def parse_footer(payload: bytes) -> Footer:
    """The footer section's JSON as a :class:`Footer`: a step, counts and a log-loss sum
    that a model can have."""
    body = load_section(payload, "footer")
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


def _whole(body: dict[str, Any], key: str, what: str, absent: int | None = None) -> int:
    """A step or a count: a whole number that a float64 (Lua's numbers) holds exactly
    (``absent``: its value when the footer has none, else it must have one)."""
    value = body[key] if absent is None else body.get(key, absent)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_STEP:
        raise SnapshotError(
            f"the footer's {key} {shown(value)} is not {what}: it must be a whole number in 0..2^53"
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
            f"the footer's admitted_recent {shown(value)} is not the features admitted in "
            f"each of {PERIODS} halving periods: it must be a list of {PERIODS} whole numbers "
            "in 0..2^53"
        )
    return tuple(value)


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
            f"the footer's logloss_sum {shown(value)} is not a sum of log losses: it must be "
            "a finite number >= 0"
        )
    return number


def _logloss_text(value: object) -> str:
    """``logloss_sum``'s digits as Redis kept them, if given (checked against it later)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > 40:
        raise SnapshotError(f"the footer's logloss_text {shown(value)} is not a number")
    return value


def _float(body: dict[str, Any], name: str) -> float:
    """A float of the footer (absent: 0.0), finite."""
    value = body.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SnapshotError(f"the footer's {name} {shown(value)} is not a finite number")
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
        raise SnapshotError(f"the footer's {name} {shown(value)} is not a finite number >= 0")
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
        raise SnapshotError(f"the footer's weight_excess {shown(value)} is not a finite number")
    return str(value)


def _check_counts(footer: Footer) -> None:
    """The counts and the log-loss text agree with one another."""
    if footer.logloss_text:
        try:
            same = float(footer.logloss_text) == footer.logloss_sum
        except ValueError:
            same = False
        if not same:
            raise SnapshotError(
                f"the footer's logloss_text {shown(footer.logloss_text)} is not its "
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


def check_for_header(footer: Footer, header: Header) -> None:
    """Only a model with a budget has its marks, and only one with a counting filter its
    admissions."""
    if header.max_features:
        _check_budget(footer)
    else:
        _check_no_budget(footer)
    if not Admission.parse(header.admission).counted:
        _check_no_filter(footer)
