"""Field crosses: one feature per named pair of fields present in an example (Vowpal Wabbit's
``-q``; the crossed features of McMahan et al. 2013, section 4).

A model's ``crosses`` name pairs of fields, ``a&b``. For each pair, an example where both
fields have a feature gets the cross feature named ``name_a&name_b``, the two features' names as
the model hashes them (``site=news&hour=20``; a number in ``log_bucket`` mode by its bucket,
``hour=6``), with x the product of their x (1 for two categories; a raw number's value). A
field that is absent, a raw 0 or a list crosses nothing: so an example gets at most one
feature per pair (a list crossed item by item would give the product of two lists' lengths,
up to a million for two lists within the per-example limit). An example's crosses follow its
own features, in the order the model names the pairs. The cross
is then a feature like any other: hashed as its name (:mod:`online_ctr.learning.features`),
admitted, expired, budgeted and learned as any other.

>>> crosses = parse_crosses("site&hour, site&os")
>>> crosses, crosses_text(crosses)
((('site', 'hour'), ('site', 'os')), 'site&hour,site&os')
>>> example_crosses({"site": "news", "hour": 20, "device": "ios"}, crosses, "log_bucket")
[('site=news&hour=8', 1.0)]
>>> parse_crosses("site&site")
Traceback (most recent call last):
...
ValueError: 'site&site' crosses a field with itself; name two different fields
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from online_ctr.learning.numeric import Numeric, log_bucket

Cross = tuple[str, str]
Crosses = tuple[Cross, ...]

#: The most crosses a model names. Each adds at most one feature per example per pair (more
#: with lists), so this bounds an example's width (and so each ``/learn`` row's work) at
#: 16 features more than its own; VW's ``-q`` users rarely name more than a handful.
MOST_CROSSES = 16
#: A field that can be crossed: 1-64 of ``A-Z a-z 0-9 _ . -`` (so that ``&``, ``,`` and ``+``
#: can separate crosses, and a cross's name reads back unambiguously).
FIELD = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
#: What a setting, an option or a body's ``crosses`` takes.
SYNTAX = "pairs of fields A&B separated by commas, such as 'site&hour,C1&C2'"


def parse_crosses(text: str | Sequence[str]) -> Crosses:
    """``a&b,c&d`` (or ``["a&b", "c&d"]``) as pairs; a ValueError saying what is wrong with
    unknown syntax, a field crossed with itself, a pair named twice or too many pairs."""
    items = text.split(",") if isinstance(text, str) else list(text)
    items = [item.strip() for item in items]
    if items == [""]:
        return ()
    crosses: list[Cross] = []
    for item in items:
        a, amp, b = item.partition("&")
        if not amp or not FIELD.fullmatch(a) or not FIELD.fullmatch(b):
            raise ValueError(
                f"{item!r} is not a cross: give {SYNTAX} (fields of 1-64 of A-Z a-z 0-9 _ . -)"
            )
        if a == b:
            raise ValueError(f"{item!r} crosses a field with itself; name two different fields")
        if (a, b) in crosses:
            raise ValueError(f"{item!r} is named twice")
        crosses.append((a, b))
    if len(crosses) > MOST_CROSSES:
        raise ValueError(f"{len(crosses)} crosses; a model names at most {MOST_CROSSES}")
    return tuple(crosses)


def crosses_text(crosses: Crosses) -> str:
    """The canonical text of ``crosses``: ``a&b,c&d`` ("" for none)."""
    return ",".join(f"{a}&{b}" for a, b in crosses)


def crossed_feature(field: str, value: object, numeric: Numeric) -> tuple[str, float] | None:
    """The feature one field's value makes, named and valued as the hasher makes it; None
    for what crosses nothing (a raw 0, a list)."""
    if isinstance(value, str):
        return f"{field}={value}", 1.0
    if isinstance(value, int | float):
        x = float(value)
        if numeric == "log_bucket":  # as the hasher buckets it: an int exactly
            return f"{field}={log_bucket(value if isinstance(value, int) else x)}", 1.0
        return (field, x) if x != 0.0 else None
    return None


def example_crosses(
    example: Mapping[str, object], crosses: Crosses, numeric: Numeric
) -> list[tuple[str, float]]:
    """The cross features of one example, named and valued, in the order of ``crosses``."""
    found: list[tuple[str, float]] = []
    for a, b in crosses:
        if a not in example or b not in example:
            continue
        left = crossed_feature(a, example[a], numeric)
        right = crossed_feature(b, example[b], numeric)
        if left is not None and right is not None:
            found.append((f"{left[0]}&{right[0]}", left[1] * right[1]))
    return found
