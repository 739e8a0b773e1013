"""Why a logit is what it is: each feature's contribution ``w * x`` to it.

A logistic regression's logit is ``sum_i w_i x_i`` over the example's features, the bias (x = 1)
among them, so it splits exactly into one term per feature (VW's ``--audit``, online). The
features are named as the model saw them: ``field=value`` for a category (one per item of a
list), and for a number what :mod:`online_ctr.learning.numeric` made of it, the category
``field=b`` of its bucket ``b`` (x = 1) with ``log_bucket``, or the numeric feature ``field``
(x = the number) with ``raw``, where 0 is absent and so not listed.

Only the ``top`` largest terms by magnitude are listed; ``rest`` is the sum of the others, so
that ``bias + sum(listed) + rest`` is the logit (up to the rounding of a float sum in another
order: a few ulps of the sum of the terms' magnitudes).

>>> sent = sent_features({"site": "news", "hour": 14, "tags": ["a", "b"]}, "log_bucket")
>>> [(s.name, s.x, s.number) for s in sent]
[('site=news', 1.0, None), ('hour=6', 1.0, 14.0), ('tags=a', 1.0, None), ('tags=b', 1.0, None)]
>>> e = explain(sent, [0.5, -2.0, 0.25, 0.0], bias_weight=-1.0, top=2)
>>> [(t.name, t.contribution) for t in e.terms], e.bias, e.rest, e.omitted
([('hour=6', -2.0), ('site=news', 0.5)], -1.0, 0.25, 2)
>>> e.bias + sum(t.contribution for t in e.terms) + e.rest
-2.25
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from online_ctr.learning.crosses import Crosses, example_crosses
from online_ctr.learning.features import Example
from online_ctr.learning.numeric import Numeric, log_bucket

#: The default of how many terms an explanation lists.
DEFAULT_TOP = 10


class Sent(NamedTuple):
    """A feature of an example as the model takes it: the name it hashes, its x, and the
    number sent for it (None for a category). A tuple: a frozen dataclass took 3x as long to
    make, most of explaining a 1,000-row Criteo body."""

    name: str
    x: float
    number: float | None = None


class Term(NamedTuple):
    """One feature's part of a logit: its weight, its x, and ``contribution = weight * x``."""

    name: str
    x: float
    weight: float
    contribution: float
    number: float | None = None


@dataclass(frozen=True)
class Explanation:
    """A logit in parts: the bias's weight (its x is 1), the ``top`` largest terms by
    ``|contribution|`` (largest first), the sum of the ``omitted`` others in ``rest``, and
    the base-rate prior's offset."""

    bias: float
    terms: list[Term]
    rest: float
    omitted: int
    #: The base-rate prior's offset (:mod:`online_ctr.learning.base_rate`), its own term.
    base_rate: float = 0.0


def sent_features(example: Example, numeric: Numeric, crosses: Crosses = ()) -> list[Sent]:
    """The features of ``example`` in the order it gives them, then its ``crosses``
    (:mod:`online_ctr.learning.crosses`, each named ``a=va&b=vb``), named and valued as
    :class:`~online_ctr.learning.features.FeatureHasher` hashes them (the bias not among them).

    >>> [s.name for s in sent_features({"site": "news", "os": "ios"}, "raw", (("site", "os"),))]
    ['site=news', 'os=ios', 'site=news&os=ios']
    """
    sent: list[Sent] = []
    for field, value in example.items():
        if isinstance(value, str):
            sent.append(Sent(f"{field}={value}", 1.0))
        elif isinstance(value, int | float):
            x = float(value)
            if numeric == "log_bucket":
                # As the hasher buckets it: an int exactly, a float as a float.
                bucket = log_bucket(value if isinstance(value, int) else x)
                sent.append(Sent(f"{field}={bucket}", 1.0, x))
            elif x != 0.0:  # a raw 0 is absent: the model never sees it
                sent.append(Sent(field, x, x))
        else:
            sent.extend(Sent(f"{field}={item}", 1.0) for item in value)
    sent.extend(Sent(name, x) for name, x in example_crosses(example, crosses, numeric))
    return sent


def explain(
    sent: Sequence[Sent],
    weights: Sequence[float],
    bias_weight: float,
    top: int,
    base_rate: float = 0.0,
) -> Explanation:
    """The explanation of a logit from its features and their weights (in the same order).

    Ties in ``|contribution|`` keep the order the features were sent in (a stable sort), so
    the same example and weights always list the same terms."""
    contributions = [w * s.x for s, w in zip(sent, weights, strict=True)]
    order = sorted(range(len(sent)), key=lambda i: -abs(contributions[i]))
    listed = [
        Term(sent[i].name, sent[i].x, weights[i], contributions[i], sent[i].number)
        for i in order[:top]
    ]
    rest = math.fsum(contributions[i] for i in order[top:])  # exactly rounded: no order to pick
    return Explanation(bias_weight, listed, rest, len(order) - len(listed), base_rate)
