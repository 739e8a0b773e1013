"""The promotion test (``online_ctr.learning.promotion``): its tallies against a numpy oracle,
its boundary against the formula as published, and its error rates on real loss differences.

The real differences are those of two FTRL configurations' progressive log losses on the
iPinYou file (rare clicks: the heaviest tails of the shared data, kurtosis about 660, where a
Gaussian-approximated boundary is most at risk). An A/A test makes the null true by flipping
each difference's sign at random (and shuffling the order); a planted test centres them and
adds a known ``delta``. Every check after every unit is made, as a sequential test must allow:
the running sums give the bound after each unit at once (``lower_bound`` is tested equal to
them below).
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.promotion import (
    Paired,
    PromotionPolicy,
    alpha_each,
    expected_units,
    promotes,
    radius,
)
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import hashed
from online_ctr.learning.rules import get_rule
from online_ctr.learning.sweep import Group

Array = np.ndarray
#: Two configurations that differ: the default FTRL and a slower, less sparse one.
CHAMPION = {"alpha": 0.1, "l1": 1.0}
CHALLENGER = {"alpha": 0.05, "l1": 0.1}
SEEDS = 500
CHUNK = 100


def progressive_losses(
    path: Path, file_format: str, configurations: list[dict[str, float]]
) -> Array:
    """Each configuration's per-example progressive log loss on the file, a row each, as
    ``online-ctr replay`` computes them (the exact sequential learner)."""
    rule = get_rule("ftrl")
    models = [InMemoryModel(rule, rule.params(**given)) for given in configurations]
    rows: list[list[Array]] = [[] for _ in models]
    for batch in hashed(read_examples(path, file_format, None), FeatureHasher(), 16_384):
        for row, model in zip(rows, models, strict=True):
            row.append(model.learn(batch).losses)
    return np.array([np.concatenate(row) for row in rows])


@pytest.fixture(scope="module")
def losses(data_dir: Path) -> Array:
    return progressive_losses(
        data_dir / "ipinyou" / "ipinyou_train.fm.txt", "libfm", [CHAMPION, CHALLENGER]
    )


@pytest.fixture(scope="module")
def differences(losses: Array) -> Array:
    return np.asarray(losses[0] - losses[1])


def ones(n: int) -> Array:
    return np.ones(n, np.int64)


@pytest.mark.parametrize("sizes", [[7, 1000, 3], [16_384], [1, 2, 4096, 9999]])
def test_batches_merge_to_one_add_and_the_numpy_oracle(losses: Array, sizes: list[int]) -> None:
    champion, challenger = losses
    margin = 0.001
    whole = Paired().add(champion, challenger, ones(len(champion)), margin)
    merged, start = Paired(), 0
    for size in sizes * (len(champion) // sum(sizes) + 1):
        end = min(start + size, len(champion))
        merged = merged.add(champion[start:end], challenger[start:end], ones(end - start), margin)
        start = end
    y = (champion - challenger) - margin * champion
    assert merged.units == whole.units == merged.examples == len(y)
    for tally in (merged, whole):
        assert tally.mean == pytest.approx(y.mean(), rel=1e-12)
        assert tally.m2 == pytest.approx(y.var() * len(y), rel=1e-12)
        assert tally.champion_loss == pytest.approx(champion.sum(), rel=1e-12)
        assert tally.challenger_loss == pytest.approx(challenger.sum(), rel=1e-12)


def test_one_unit_at_a_time_equals_the_whole(losses: Array) -> None:
    champion, challenger = losses[:, :5000]
    one_by_one = Paired()
    for j in range(len(champion)):
        one_by_one = one_by_one.add(champion[j : j + 1], challenger[j : j + 1], ones(1), 0.01)
    whole = Paired().add(champion, challenger, ones(len(champion)), 0.01)
    assert one_by_one.units == whole.units
    assert one_by_one.mean == pytest.approx(whole.mean, rel=1e-12)
    assert one_by_one.m2 == pytest.approx(whole.m2, rel=1e-12)


def test_a_unit_of_several_examples_counts_them() -> None:
    paired = Paired().add(np.array([3.0, 1.0]), np.array([1.0, 1.0]), np.array([5, 2]), 0.0)
    assert (paired.units, paired.examples, paired.mean) == (2, 7, 1.0)


def literal_boundary(t: int, a: float, planned: int) -> float:
    """Waudby-Smith et al. (2021), Theorem 2.2 with rho from their equation 13, as printed."""
    rho2 = (-2 * math.log(a) + math.log(-2 * math.log(a) + 1)) / planned
    return math.sqrt((t * rho2 + 1) / rho2 * (2 * math.log(1 / a) + math.log(t * rho2 + 1)))


@pytest.mark.parametrize("a", [0.05, 0.05 / 11, 1e-6])
@pytest.mark.parametrize("planned", [1, 1000, 10_000])
def test_radius_is_the_published_boundary(a: float, planned: int) -> None:
    for t in (1, 2, 10, 999, 10_000, 123_457):
        assert radius(t, a, planned) == pytest.approx(literal_boundary(t, a, planned), rel=1e-14)


def test_lower_bound_crosses_where_the_sum_crosses_the_boundary(differences: Array) -> None:
    a, planned = 0.05, 10_000
    zeros = np.zeros(len(differences))
    for t in (2, 500, 5000, len(differences)):
        y = differences[:t] + 0.002  # some cross, some do not
        paired = Paired().add(y, zeros[:t], ones(t), 0.0)
        s = float(np.std(y, ddof=1))
        assert paired.lower_bound(a, planned) == pytest.approx(
            y.mean() - s * literal_boundary(t, a, planned) / t, rel=1e-9, abs=1e-15
        )
        assert (paired.lower_bound(a, planned) > 0) == (
            y.sum() > s * literal_boundary(t, a, planned)
        )
    assert Paired().add(zeros[:1], zeros[:1], ones(1), 0.0).lower_bound(a, planned) == -math.inf


@pytest.mark.parametrize(
    ("mean", "sd", "planned", "challengers"),
    [(0.01, 0.1, 1000, 1), (0.001, 0.2, 10_000, 11), (0.5, 0.1, 100, 3), (1e-5, 0.01, 10**6, 1)],
)
def test_expected_units_is_the_least_that_crosses(
    mean: float, sd: float, planned: int, challengers: int
) -> None:
    policy = PromotionPolicy(planned_units=planned)
    a = alpha_each(policy, challengers)
    t = expected_units(mean, sd, policy, challengers)
    assert t * mean > sd * radius(t, a, planned)
    assert t == 1 or (t - 1) * mean <= sd * radius(t - 1, a, planned)
    with pytest.raises(ValueError, match="not better"):
        expected_units(0.0, sd, policy, challengers)


@cache
def boundaries(n: int, a: float, planned: int) -> Array:
    """``radius`` after 1 to ``n`` units."""
    return np.array([radius(units, a, planned) for units in range(1, n + 1)])


def first_crossings(y: Array, policy: PromotionPolicy, challengers: int) -> Array:
    """Per row of scores, the unit (from 1) after which ``promotes`` first holds; 0 if never:
    the bound after every unit from running sums, ``radius`` itself for the boundary."""
    n = y.shape[1]
    t = np.arange(1.0, n + 1.0)
    boundary = boundaries(n, alpha_each(policy, challengers), policy.planned_units)
    total, squares = np.cumsum(y, axis=1), np.cumsum(y * y, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(np.maximum(squares - total * total / t, 0.0) / (t - 1.0))
    crossed = (total / t - sd * boundary / t > 0.0) & (t >= max(policy.min_examples, 2))
    return np.where(crossed.any(axis=1), np.argmax(crossed, axis=1) + 1, 0)


def unit_by_unit(y: Array, policy: PromotionPolicy, challengers: int) -> int:
    """The same as :func:`first_crossings` for one row, literally: add, ask, repeat."""
    paired, zero = Paired(), np.zeros(1)
    for j in range(len(y)):
        paired = paired.add(y[j : j + 1], zero, ones(1), 0.0)
        if promotes(paired, policy, challengers):
            return j + 1
    return 0


def test_a_a_the_null_is_crossed_at_most_as_often_as_alpha(differences: Array) -> None:
    """Sign flips make the mean difference 0 in every seed (margin 0: the null's edge, the
    hardest case); the share of seeds that ever promote, checked after every unit."""
    policy = PromotionPolicy(margin=0.0)
    rng = np.random.default_rng(35)
    n, promoted, crossed = len(differences), 0, []
    for _ in range(SEEDS // CHUNK):  # a chunk of seeds at a time: 100 x 27k floats per array
        order = np.array([rng.permutation(n) for _ in range(CHUNK)])
        y = differences[order] * rng.choice([-1.0, 1.0], size=(CHUNK, n))
        stops = first_crossings(y, policy, challengers=1)
        promoted += int(np.count_nonzero(stops))
        crossed += [(y[seed, : stops[seed]], int(stops[seed])) for seed in np.flatnonzero(stops)]
    for scores, stop in crossed[:1]:  # the running sums say what promotes says, unit by unit
        assert unit_by_unit(scores, policy, 1) == stop
    a = alpha_each(policy, 1)
    print(f"A/A: {promoted} of {SEEDS} seeds promoted ({promoted / SEEDS:.3f}; alpha {a:.3f})")
    assert promoted <= binom.ppf(0.999, SEEDS, a), f"{promoted} of {SEEDS} seeds promoted"


def test_a_planted_better_challenger_is_promoted_about_when_expected(differences: Array) -> None:
    policy = PromotionPolicy(margin=0.0)
    a = alpha_each(policy, 1)
    sd = float(np.std(differences, ddof=1))
    planned = 4000  # units at which, on average, the planted sum reaches the boundary
    delta = sd * radius(planned, a, policy.planned_units) / planned
    expected = expected_units(delta, sd, policy, 1)
    rng = np.random.default_rng(7)
    planted = differences - differences.mean() + delta
    y = planted[np.array([rng.permutation(len(planted)) for _ in range(CHUNK)])]
    stops = first_crossings(y, policy, challengers=1)
    median = float(np.median(stops[stops > 0]))
    print(
        f"planted delta {delta:.6f} (sd {sd:.4f}): {np.count_nonzero(stops)} of {CHUNK} "
        f"promoted, median unit {median:.0f}, expected_units {expected}"
    )
    assert np.count_nonzero(stops) >= 0.99 * len(stops)
    assert 0.5 * expected <= median <= 1.5 * expected, (median, expected)
    assert unit_by_unit(y[0], policy, 1) == stops[0]


@pytest.mark.parametrize("margin", [0.0, 0.001])
def test_a_group_of_identical_models_never_promotes(losses: Array, margin: float) -> None:
    group = Group(3, PromotionPolicy(margin=margin, min_examples=2, planned_units=100))
    group.add(np.vstack([losses[0]] * 3))
    assert [served.configuration for served in group.timeline] == [0]
    assert group.served_losses == [pytest.approx(losses[0].sum())]
