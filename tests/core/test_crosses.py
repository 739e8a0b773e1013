"""Field crosses in the in-process hasher: the syntax and its refusals, one feature per pair
present, named ``a=va&b=vb`` as the fields' own features are named, after the example's own
features in the pairs' order, the same on a warm cache as on a cold one."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from online_ctr.learning.crosses import MOST_CROSSES, crosses_text, parse_crosses
from online_ctr.learning.explain import sent_features
from online_ctr.learning.features import BIAS, FeatureHasher, feature_id
from online_ctr.learning.numeric import log_bucket
from online_ctr.learning.readers import read_examples

SITE_HOUR = (("site", "hour"),)


def ids_of(*names: str) -> list[int]:
    return [feature_id(name) for name in names]


def test_the_syntax_is_read_and_written_back() -> None:
    assert parse_crosses("") == parse_crosses([]) == ()
    crosses = parse_crosses(" site&hour ,C1&C2")
    assert crosses == (("site", "hour"), ("C1", "C2")) == parse_crosses(["site&hour", "C1&C2"])
    assert crosses_text(crosses) == "site&hour,C1&C2"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("site", "is not a cross"),
        ("site&", "is not a cross"),
        ("a&b&c", "is not a cross"),
        ("si te&hour", "is not a cross"),
        ("site&hour,", "is not a cross"),
        ("hour&hour", "crosses a field with itself"),
        ("a&b,a&b", "is named twice"),
        (",".join(f"a&b{i}" for i in range(MOST_CROSSES + 1)), f"at most {MOST_CROSSES}"),
    ],
)
def test_bad_crosses_are_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_crosses(text)


def test_a_cross_is_one_feature_after_the_examples_own() -> None:
    hasher = FeatureHasher(crosses=(("site", "hour"), ("os", "site")))
    batch = hasher.batch(
        [{"site": "news", "hour": "20", "os": "ios"}, {"site": "blog"}, {"hour": "1", "os": "a"}]
    )
    assert batch.indptr.tolist() == [0, 6, 8, 11]
    want = ids_of(BIAS, "site=news", "hour=20", "os=ios", "site=news&hour=20", "os=ios&site=news")
    want += ids_of(BIAS, "site=blog") + ids_of(BIAS, "hour=1", "os=a")
    assert batch.ids.tolist() == want
    assert batch.values.tolist() == [1.0] * 11


def test_numbers_cross_as_the_model_names_them() -> None:
    example = {"site": "news", "hour": 20, "price": 2.5, "zero": 0}
    crosses = (("site", "hour"), ("site", "price"), ("site", "zero"))
    bucketed = FeatureHasher(numeric="log_bucket", crosses=crosses).batch([example])
    price, zero = log_bucket(2.5), log_bucket(0)
    want = ids_of("site=news&hour=8", f"site=news&price={price}", f"site=news&zero={zero}")
    assert bucketed.ids.tolist()[-3:] == want
    raw = FeatureHasher(numeric="raw", crosses=crosses).batch([example])
    # A raw number is the feature ``field`` of x its value: the cross's x is the product;
    # a raw 0 is absent, and crosses nothing.
    assert raw.ids.tolist()[-2:] == ids_of("site=news&hour", "site=news&price")
    assert raw.values.tolist()[-2:] == [20.0, 2.5]


def test_a_list_crosses_nothing() -> None:
    """An example gets at most one feature per pair: a list crossed item by item could give
    the product of two lists' lengths."""
    hasher = FeatureHasher(crosses=(("tags", "site"), ("site", "os")))
    batch = hasher.batch([{"site": "news", "tags": ["a", "b", "a"], "os": "ios"}])
    ids = dict(zip(batch.ids.tolist(), batch.values.tolist(), strict=True))
    assert ids == {
        feature_id(BIAS): 1.0, feature_id("site=news"): 1.0, feature_id("tags=a"): 2.0,
        feature_id("tags=b"): 1.0, feature_id("os=ios"): 1.0, feature_id("site=news&os=ios"): 1.0,
    }  # fmt: skip


def test_explain_names_the_crosses_as_the_hasher_hashes_them() -> None:
    example = {"site": "news", "hour": 20}
    sent = sent_features(example, "log_bucket", SITE_HOUR)
    assert [s.name for s in sent] == ["site=news", "hour=8", "site=news&hour=8"]
    batch = FeatureHasher(numeric="log_bucket", crosses=SITE_HOUR).batch([example])
    assert batch.ids.tolist()[1:] == ids_of(*(s.name for s in sent))


@pytest.mark.parametrize("hash_bits", [None, 8])
def test_a_warm_cache_makes_the_cold_ones_batch(data_dir: Path, hash_bits: int | None) -> None:
    rows = [x for x, _ in itertools.islice(read_examples(criteo(data_dir), "criteo"), 500)]
    crosses = parse_crosses("C1&C2,I1&C3,C14&C17")
    hasher = FeatureHasher(hash_bits, crosses=crosses)
    cold = hasher.batch(rows)
    warm = hasher.batch(rows)
    fresh = FeatureHasher(hash_bits, crosses=crosses)
    one_by_one = [fresh.batch([row]) for row in rows]
    for part in ("indptr", "ids", "values"):
        assert np.array_equal(getattr(cold, part), getattr(warm, part)), part
    # Merging sorts every row of a batch where one repeats: alone, rows may not be sorted.
    alone = np.concatenate([np.sort(b.ids) if hash_bits else b.ids for b in one_by_one])
    in_batch = [np.sort(r) if hash_bits else r for r in np.split(cold.ids, cold.indptr[1:-1])]
    assert np.array_equal(np.concatenate(in_batch), alone)
    plain = FeatureHasher(hash_bits).batch(rows)
    added = np.diff(cold.indptr) - np.diff(plain.indptr)
    assert added.sum() > 0 and added.max() <= len(crosses)
    if hash_bits is None:  # every cross present is one more id, after the example's own
        for j in (0, 7, 499):
            own = plain.ids[plain.indptr[j] : plain.indptr[j + 1]]
            assert np.array_equal(cold.ids[cold.indptr[j] : cold.indptr[j] + len(own)], own)


def criteo(data_dir: Path) -> Path:
    return data_dir / "criteo/criteo_kaggle_train_head10k.tsv"
