"""How a numeric feature value enters the model: ``raw`` or ``log_bucket``.

- ``raw``: the numeric feature ``field`` with ``x = value`` (0 is absent). A raw number is
  multiplied by its weight, so one large value (``"hour": 14``) moves the logit 14 times as far
  as a category does, and its gradient ``(p - y) x`` is 14 times as large: a few such values can
  wreck a model that is otherwise all categories.
- ``log_bucket`` (the service's default): the value becomes the categorical feature
  ``field=b`` (x = 1) with ``b = log_bucket(value)``, the bucketing the Criteo reader applies to
  the challenge's counts (``floor(ln(x)^2)`` above 2, from the winning solution of team
  "3 Idiots", Juan et al.), mirrored for negatives and truncated towards zero in between.
  Buckets grow ever wider, so heavy-tailed values share a handful of categories; 0 is a bucket
  of its own (present, not absent).

Both apply in :class:`online_ctr.learning.features.FeatureHasher`, the one place ``/predict``,
``/learn``
and the in-process replay turn values into (id, x) pairs, so they cannot disagree.

>>> [log_bucket(x) for x in (0, 0.5, 1, 2, 2.5, 14, 1382, -1, -14)]
[0, 0, 1, 2, 0, 6, 52, -1, -6]
"""

from __future__ import annotations

import math
from typing import Literal

Numeric = Literal["raw", "log_bucket"]
#: The handlings there are; the first is what a model gets unless told otherwise.
NUMERIC_HANDLINGS: tuple[Numeric, ...] = ("log_bucket", "raw")


def log_bucket(x: float) -> int:
    """The bucket of ``x``: ``floor(ln(x)^2)`` for ``x > 2``, ``-log_bucket(-x)`` for ``x < -2``,
    and ``x`` truncated towards zero in between (whole numbers there are their own bucket).

    Integers of any size are taken exactly (``math.log`` of an ``int`` does not overflow).

    >>> log_bucket(3), log_bucket(10**400), log_bucket(-2.9), log_bucket(1e300)
    (1, 848303, -1, 477170)
    """
    if x > 2:
        return int(math.log(x) ** 2)
    if x < -2:
        return -int(math.log(-x) ** 2)
    return int(x)


def check_numeric(value: str) -> Numeric:
    """``value`` if it names a handling, else a ``ValueError`` listing the names there are."""
    for handling in NUMERIC_HANDLINGS:
        if value == handling:
            return handling
    raise ValueError(f"unknown numeric handling {value!r}; choose one of log_bucket, raw")
