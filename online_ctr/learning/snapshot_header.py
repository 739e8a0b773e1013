"""A snapshot's header (:mod:`online_ctr.learning.snapshot`) read as untrusted: every field
checked against what a model can be (its rule and hyper-parameters, hashing, stored settings),
and what is not is named."""

from __future__ import annotations

from typing import Any

from online_ctr.learning import eviction, retention
from online_ctr.learning.admission import Admission
from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.calibration import CALIBRATIONS
from online_ctr.learning.compact import ENCODINGS, check_encoding
from online_ctr.learning.crosses import crosses_text, parse_crosses
from online_ctr.learning.numeric import NUMERIC_HANDLINGS
from online_ctr.learning.retention import NEVER
from online_ctr.learning.rules import get_rule
from online_ctr.learning.snapshot import (
    BUDGET_NAMES,
    SPAN_NAMES,
    Header,
    SnapshotError,
    load_section,
    shown,
)


def parse_header(payload: bytes) -> Header:
    """The header section's JSON as a :class:`Header`, checked against the rule it names."""
    body = load_section(payload, "header")
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
        raise SnapshotError(f"the header's hash_bits {shown(value)} is not in 1..64 (or null)")
    return value


def _choice(body: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    """One of a stored setting's values; absent, its first (what models had before it)."""
    value = body.get(key, choices[0])
    if value not in choices:
        raise SnapshotError(f"the header's {key} {shown(value)} is not one of {', '.join(choices)}")
    return str(value)


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
