"""Negative subsampling (McMahan et al. 2013, section 4.4): what is kept and how it is weighted,
that the choice is a pure function of the example, how much is kept of real non-clicks, and the
stream entries that carry the weights."""

from __future__ import annotations

import math
import struct
from dataclasses import replace
from itertools import islice, pairwise

import numpy as np
import pytest

from online_ctr.learning.features import Batch, FeatureHasher, concat
from online_ctr.learning.readers import read_examples
from online_ctr.learning.sampling import (
    MIN_RATE,
    check_rate,
    example_hashes,
    keep_negatives,
    kept_negatives,
)
from online_ctr.store.codec import EntryError, decode_entries, decode_entry, encode_entry
from testkit.paths import CRITEO
from tests.core.test_sequential import criteo


def same_batch(a: Batch, b: Batch) -> None:
    """Equal arrays, to the bit, and weights given in both or neither."""
    for field in ("indptr", "ids", "values", "labels"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert (a.weights is None) == (b.weights is None)
    if a.weights is not None and b.weights is not None:
        np.testing.assert_array_equal(a.weights, b.weights)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_clicks_are_all_kept_and_the_kept_non_clicks_weigh_one_over_the_rate(rate: float) -> None:
    batch, _ = criteo(2000)
    sampled = keep_negatives(batch, rate)
    chosen = (batch.labels == 1) | kept_negatives(batch, rate)
    rows = np.flatnonzero(chosen)
    assert 0 < len(sampled) == len(rows) < len(batch)
    # The kept examples are the batch's own, features and labels unchanged, in their order.
    for j, row in enumerate(rows.tolist()):
        kept, own = sampled.examples(j, j + 1), batch.examples(row, row + 1)
        same_batch(replace(kept, weights=None), own)
    clicks = sampled.labels == 1
    assert int(clicks.sum()) == int(batch.labels.sum())
    assert sampled.weights is not None
    assert (sampled.weights[clicks] == 1.0).all()
    assert (sampled.weights[~clicks] == 1.0 / rate).all()


def test_an_example_s_own_weight_is_multiplied() -> None:
    batch, _ = criteo(2000)
    own = np.random.default_rng(4).uniform(0.1, 5.0, len(batch))
    sampled = keep_negatives(replace(batch, weights=own), 0.3)
    rows = np.flatnonzero((batch.labels == 1) | kept_negatives(batch, 0.3))
    clicks = sampled.labels == 1
    assert sampled.weights is not None
    np.testing.assert_array_equal(sampled.weights[clicks], own[rows][clicks])
    np.testing.assert_array_equal(sampled.weights[~clicks], (1.0 / 0.3) * own[rows][~clicks])
    # Which examples are kept does not depend on their weights.
    np.testing.assert_array_equal(sampled.labels, keep_negatives(batch, 0.3).labels)


def test_rate_one_returns_the_batch_itself() -> None:
    batch, _ = criteo(100)
    assert keep_negatives(batch, 1.0) is batch
    weighted = replace(batch, weights=np.full(len(batch), 2.0))
    assert keep_negatives(weighted, 1.0) is weighted
    assert kept_negatives(batch, 1.0).all()  # every hash is below 1


def test_the_choice_is_a_pure_function_of_the_example() -> None:
    """The same example is kept or dropped wherever it is: alone, in another batch, at another
    position, and with its features given in another order."""
    examples = list(islice(read_examples(CRITEO, "criteo"), 600))
    hasher = FeatureHasher()
    rows, labels = [x for x, _ in examples], [0] * len(examples)  # all non-clicks
    batch = hasher.batch(rows, labels)
    kept = kept_negatives(batch, 0.3)
    assert 0 < kept.sum() < len(batch)
    alone = [bool(kept_negatives(hasher.batch([x], [0]), 0.3)[0]) for x in rows[:50]]
    assert alone == kept[:50].tolist()
    backwards = hasher.batch(rows[::-1], labels)
    np.testing.assert_array_equal(kept_negatives(backwards, 0.3), kept[::-1])
    reordered = hasher.batch([dict(reversed(list(x.items()))) for x in rows], labels)
    assert not np.array_equal(reordered.ids, batch.ids)  # the features' order did change
    np.testing.assert_array_equal(example_hashes(reordered), example_hashes(batch))
    others = hasher.batch([{"site": str(i)} for i in range(37)], [0] * 37)
    inside = concat([others, batch.examples(100, 300), others])
    np.testing.assert_array_equal(kept_negatives(inside, 0.3)[37:237], kept[100:300])
    # Its label and weight play no part in the hash; its values do.
    clicks = replace(batch, labels=np.ones(len(batch)), weights=np.full(len(batch), 3.0))
    np.testing.assert_array_equal(example_hashes(clicks), example_hashes(batch))
    doubled = replace(batch, values=2.0 * batch.values)
    assert not (example_hashes(doubled) == example_hashes(batch)).any()


def test_a_lower_rate_keeps_a_subset() -> None:
    """A non-click is kept while its hash, as a number in [0, 1), is below the rate: lowering
    the rate only drops non-clicks."""
    batch, _ = criteo(10_000)
    kept = [kept_negatives(batch, rate) for rate in (0.03, 0.1, 0.3, 0.6)]
    for fewer, more in pairwise(kept):
        assert (more | ~fewer).all()


@pytest.mark.parametrize("rate", [0.0, -0.1, MIN_RATE / 2, 1.0 + 1e-9, 2.0, math.nan, math.inf])
def test_rates_outside_the_range_are_refused(rate: float) -> None:
    batch, _ = criteo(10)
    with pytest.raises(ValueError, match=f"the negative rate must be from {MIN_RATE} to 1"):
        keep_negatives(batch, rate)


def test_the_lowest_rate_is_accepted() -> None:
    check_rate(MIN_RATE)
    batch, _ = criteo(2000)
    sampled = keep_negatives(batch, MIN_RATE)
    assert sampled.weights is not None
    assert set(sampled.weights.tolist()) <= {1.0, 1.0 / MIN_RATE}


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_the_kept_fraction_of_criteo_non_clicks_is_the_rate(rate: float) -> None:
    """The 7,818 non-clicks of the Criteo head are all distinct, so how many are kept, ``K``,
    is Binomial(N, r) if the hash is as good as uniform: within 4 standard deviations,
    ``|K - N r| <= 4 sqrt(N r (1 - r))`` (a 1-in-15,000 miss for a fair coin). Divided by
    ``r``, the same bound says the weighted count ``K / r`` estimates the true count ``N``
    within ``4 sqrt(N (1 - r) / r)``: 1,061 at r = 0.1, 540 at 0.3. Measured: 801 kept at 0.1
    (+0.7 standard deviations; weighted count 8,010) and 2,358 at 0.3 (+0.3; 7,860)."""
    batch, _ = criteo(10_000)
    negatives = batch.labels == 0
    n = int(negatives.sum())
    assert n == 7818
    assert len(np.unique(example_hashes(batch)[negatives])) == n
    kept = int(kept_negatives(batch, rate)[negatives].sum())
    assert abs(kept - n * rate) <= 4 * math.sqrt(n * rate * (1 - rate)), kept
    sampled = keep_negatives(batch, rate)
    assert sampled.weights is not None
    weighted_count = float(sampled.weights[sampled.labels == 0].sum())
    assert weighted_count == pytest.approx(kept / rate, rel=1e-12)
    assert abs(weighted_count - n) <= 4 * math.sqrt(n * (1 - rate) / rate), weighted_count


def test_a_sampled_batch_goes_through_a_stream_entry_unchanged() -> None:
    batch, _ = criteo(500)
    sampled = keep_negatives(batch, 0.3)
    same_batch(decode_entry(encode_entry(sampled)), sampled)
    own = replace(batch, weights=np.random.default_rng(1).uniform(0.5, 2.0, len(batch)))
    same_batch(decode_entry(encode_entry(keep_negatives(own, 0.1))), keep_negatives(own, 0.1))
    # Weights of exactly 1 are the entry of no weights, byte for byte: no flag, none stored.
    ones = replace(batch, weights=np.ones(len(batch)))
    assert encode_entry(ones) == encode_entry(batch)
    assert decode_entry(encode_entry(ones)).weights is None
    # Entries with and without weights decode together, the latter's weights 1.
    together = decode_entries([encode_entry(batch), encode_entry(sampled)])
    assert together.weights is not None
    expected = [1.0] * len(batch) + sampled.example_weights().tolist()
    assert together.weights.tolist() == expected


def entry(weight: float, flags: int = 2, weights: int = 1, version: int = 2) -> bytes:
    """A one-example entry written byte by byte (the layout in ``codec``'s docstring): one
    click with the feature ids 7 and 9, values 1, and ``weights`` weights of ``weight``."""
    header = struct.pack("<BIIB", version, 1, 2, flags)
    body = b"\x01" + struct.pack("<2I", 0, 2) + struct.pack("<2Q", 7, 9)
    return header + body + struct.pack(f"<{weights}d", *[weight] * weights)


def test_an_entry_written_by_hand_decodes_to_its_weight() -> None:
    batch = decode_entry(entry(2.5))
    assert (batch.indptr.tolist(), batch.ids.tolist(), batch.labels.tolist()) == (
        [0, 2],
        [7, 9],
        [1.0],
    )
    assert batch.weights is not None
    assert batch.weights.tolist() == [2.5]


@pytest.mark.parametrize("weight", [0.0, -0.0, -1.0, math.nan, math.inf, -math.inf])
def test_an_entry_with_a_weight_not_above_zero_or_not_finite_is_refused(weight: float) -> None:
    with pytest.raises(EntryError, match="importance weight that is not finite and above 0"):
        decode_entry(entry(weight))
    with pytest.raises(EntryError, match="importance weight"):  # among other entries too
        decode_entries([entry(1.5), entry(weight)])


def test_an_entry_with_missing_weights_or_an_unknown_flag_is_refused() -> None:
    with pytest.raises(EntryError, match="its header implies"):
        decode_entry(entry(2.0, weights=0))
    with pytest.raises(EntryError, match="its header implies"):
        decode_entry(entry(2.0, weights=2))
    with pytest.raises(EntryError, match="entry version 2 with unknown flags 0x6"):
        decode_entry(entry(2.0, flags=6))


def test_weights_in_a_version_1_entry_are_refused() -> None:
    """Weighted entries are version 2: a version 1 entry claiming weights is not ours (and a
    worker from before weights refuses every version 2 entry rather than misread it)."""
    with pytest.raises(EntryError, match="entry version 1 with unknown flags 0x2"):
        decode_entry(entry(2.0, version=1))
    assert encode_entry(decode_entry(entry(2.0)))[0] == 2
    unweighted = decode_entry(entry(2.0, flags=0, weights=0, version=1))
    assert encode_entry(unweighted)[0] == 1 and unweighted.weights is None
