"""Numeric handling: the log buckets, and the hasher applying raw or log_bucket."""

from __future__ import annotations

import math

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.numeric import check_numeric, log_bucket
from online_ctr.learning.readers import criteo_bucket


@pytest.mark.parametrize(
    ("x", "bucket"),
    [
        (0, 0),
        (0.0, 0),
        (-0.0, 0),
        (0.999, 0),
        (1, 1),
        (1.5, 1),
        (2, 2),  # the last value that is its own bucket
        (2.0000001, 0),  # ln(2)^2 = 0.48: just above 2 falls back to bucket 0 (as Criteo's)
        (7.38, 3),  # bucket 4 starts at e^2 = 7.389
        (7.39, 4),
        (14, 6),  # the README's hour: ln(14)^2 = 6.96
        (1382, 52),
        (-0.5, 0),  # truncated towards zero
        (-1, -1),
        (-2, -2),
        (-14, -6),  # mirrored
        (1e15, 1192),  # the API's largest magnitude
        (-1e15, -1192),
        (1e300, 477170),
        (10**400, 848303),  # an int beyond float range is taken exactly
    ],
)
def test_log_bucket_boundaries(x: float, bucket: int) -> None:
    assert log_bucket(x) == bucket


def test_buckets_are_monotone_and_mirrored() -> None:
    xs = np.concatenate(([3.0], np.geomspace(3, 1e15, 2000)))
    buckets = [log_bucket(float(x)) for x in xs]
    assert buckets == sorted(buckets)
    assert all(log_bucket(-float(x)) == -b for x, b in zip(xs, buckets, strict=True))
    # Width grows: bucket b covers [exp(sqrt(b)), exp(sqrt(b + 1))).
    assert log_bucket(math.exp(math.sqrt(100)) * 1.0001) == 100
    assert log_bucket(math.exp(math.sqrt(100)) * 0.9999) == 99


def test_the_criteo_reader_uses_the_same_buckets() -> None:
    for count in [-2, -1, 0, 1, 2, 3, 7, 260, 1382, 10**9]:
        assert criteo_bucket(str(count)) == str(log_bucket(count))
    assert criteo_bucket("260.0") == "30"


def test_raw_keeps_the_value_and_drops_zero() -> None:
    hasher = FeatureHasher()
    batch = hasher.batch([{"hour": 14, "zero": 0, "neg": -3.5}])
    assert batch.values.tolist() == [1.0, 14.0, -3.5]
    assert batch.ids[1] == hasher.id("hour")


def test_log_bucket_makes_a_category_named_like_the_criteo_reader() -> None:
    hasher = FeatureHasher(numeric="log_bucket")
    batch = hasher.batch([{"hour": 14, "zero": 0, "neg": -3.5, "I5": 1382.0}])
    assert batch.values.tolist() == [1.0] * 5  # zero is a bucket of its own, present
    names = ["", "hour=6", "zero=0", "neg=-1", "I5=52"]
    assert batch.ids.tolist() == [hasher.id(name) for name in names]


def test_log_bucket_fast_path_equals_the_first_pass() -> None:
    # The second batch finds every (field, number) cached and takes the path without a loop.
    hasher = FeatureHasher(numeric="log_bucket")
    examples = [{"hour": float(h), "site": "a"} for h in range(24)] * 3
    first = hasher.batch(examples)
    second = hasher.batch(examples)
    fresh = FeatureHasher(numeric="log_bucket").batch(examples)
    for batch in (second, fresh):
        assert batch.ids.tolist() == first.ids.tolist()
        assert batch.values.tolist() == first.values.tolist()


def test_a_raw_hasher_never_caches_numbers_as_categories() -> None:
    hasher = FeatureHasher()
    hasher.batch([{"hour": 14}])
    assert hasher.batch([{"hour": 14}]).values.tolist() == [1.0, 14.0]


@pytest.mark.parametrize("numeric", ["raw", "log_bucket"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused_in_every_handling(numeric: str, bad: float) -> None:
    hasher = FeatureHasher(numeric=numeric)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-finite value"):
        hasher.batch([{"hour": bad}])


def test_unknown_handlings_are_refused() -> None:
    with pytest.raises(ValueError, match="choose one of log_bucket, raw"):
        check_numeric("standardize")
    with pytest.raises(ValueError, match="choose one of"):
        FeatureHasher(numeric="zscore")  # type: ignore[arg-type]
