"""The offline group (``online_ctr.learning.sweep``): its closed-form bounds against the
promotion test applied literally after every example, on real progressive losses."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from loadtests.bench.baseline import running_mean_logloss, running_mean_probabilities
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.promotion import Paired, PromotionPolicy, alpha_each, promotes, radius
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import hashed
from online_ctr.learning.rules import get_rule
from online_ctr.learning.stream_metrics import log_loss
from online_ctr.learning.sweep import Group, MeanBaseline, radii, sweep
from tests.core.test_promotion import progressive_losses

Array = np.ndarray
#: Four FTRL configurations, slowest first, far enough apart for promotions on 10k rows.
GRID = [
    {"alpha": 0.01, "l1": 3.0},
    {"alpha": 0.02, "l1": 1.0},
    {"alpha": 0.05, "l1": 1.0},
    {"alpha": 0.1, "l1": 0.1},
]
#: Small enough that the Criteo head sees several promotions.
POLICY = PromotionPolicy(margin=0.001, confidence=0.95, min_examples=200, planned_units=1000)


@pytest.fixture(scope="module")
def losses(data_dir: Path) -> Array:
    return progressive_losses(
        data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv", "criteo", GRID
    )


@pytest.fixture(scope="module")
def literal(losses: Array) -> tuple[list[tuple[int, int]], list[float]]:
    return literal_group(losses, POLICY)


def literal_group(
    losses: Array, policy: PromotionPolicy
) -> tuple[list[tuple[int, int]], list[float]]:
    """The group as the docs say it: pair every challenger on each example, ask ``promotes``
    of each, promote the highest lower bound, start every tally again. The timeline, and
    the loss served by each of its entries."""
    k, n = losses.shape
    serving, paired, timeline, served = 0, [Paired()] * k, [(0, 0)], [0.0]
    for j in range(n):
        served[-1] += losses[serving, j]
        challengers = [c for c in range(k) if c != serving]
        for c in challengers:
            paired[c] = paired[c].add(
                losses[serving, j : j + 1],
                losses[c, j : j + 1],
                np.ones(1, np.int64),
                policy.margin,
            )
        winners = [c for c in challengers if promotes(paired[c], policy, k - 1)]
        if winners:
            a = alpha_each(policy, k - 1)
            serving = max(winners, key=lambda c: paired[c].lower_bound(a, policy.planned_units))
            timeline.append((j + 1, serving))
            paired = [Paired()] * k
            served.append(0.0)
    return timeline, served


@pytest.mark.parametrize("size", [1_000_000, 4096, 777])
def test_the_group_promotes_where_the_literal_test_does(
    losses: Array, literal: tuple[list[tuple[int, int]], list[float]], size: int
) -> None:
    expected, served = literal
    assert len(expected) >= 3  # the test is about promotions: there must be some
    group = Group(len(GRID), POLICY)
    for start in range(0, losses.shape[1], size):
        group.add(losses[:, start : start + size])
    assert [(s.example, s.configuration) for s in group.timeline] == expected
    np.testing.assert_allclose(group.served_losses, served, rtol=1e-12)
    assert group.examples == losses.shape[1]
    promoted = group.timeline[1].paired
    assert promoted is not None and promoted.units == expected[1][0]


def test_the_first_configuration_serves_until_a_promotion() -> None:
    group = Group(2, POLICY)
    group.add(np.array([[0.5] * 100, [0.1] * 100]))  # better, but fewer than min_examples
    assert (group.serving, len(group.timeline), group.paired[1].units) == (0, 1, 100)
    assert group.served_logloss == 0.5 and group.served_losses == [50.0]


def test_a_single_configuration_is_a_group_too() -> None:
    group = Group(1, POLICY)
    group.add(np.array([[0.25, 0.75]]))
    assert (group.serving, group.served_logloss) == (0, 0.5)
    with pytest.raises(ValueError, match="at least one"):
        Group(0, POLICY)


def test_radii_are_radius_at_every_count() -> None:
    units = np.array([1.0, 2.0, 999.0, 10_000.0, 1e7])
    for a, planned in [(0.05, 10_000), (0.05 / 63, 1000), (1e-4, 1)]:
        expected = [radius(int(t), a, planned) for t in units]
        np.testing.assert_allclose(radii(units, a, planned), expected, rtol=1e-14)


def test_the_baseline_is_the_benchmarks_running_mean(data_dir: Path) -> None:
    labels = np.array(
        [y for _, y in read_examples(data_dir / "avazu" / "avazu_train_head10k.csv", "avazu")]
    )
    baseline = MeanBaseline()
    for start in range(0, len(labels), 999):
        baseline.add(labels[start : start + 999].astype(np.float64))
    assert baseline.logloss == pytest.approx(running_mean_logloss(labels), rel=1e-12)
    rate = labels.mean()
    entropy = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
    assert baseline.overall_logloss == pytest.approx(entropy, rel=1e-12)
    assert math.isnan(MeanBaseline().logloss)


def test_sweep_learns_every_model_on_every_batch(
    data_dir: Path, losses: Array, literal: tuple[list[tuple[int, int]], list[float]]
) -> None:
    rule = get_rule("ftrl")
    models = [InMemoryModel(rule, rule.params(**given)) for given in GRID]
    path = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    seen: list[int] = []
    result = sweep(
        hashed(read_examples(path, "criteo"), FeatureHasher(), 3000),
        models,
        POLICY,
        on_batch=lambda group: seen.append(group.examples),
    )
    assert seen == [3000, 6000, 9000, 10_000]
    np.testing.assert_allclose(result.logloss, losses.mean(axis=1), rtol=1e-12)
    assert result.examples == 10_000 and result.positives == 2182
    assert [(s.example, s.configuration) for s in result.group.timeline] == literal[0]
    labels = np.array([y for _, y in read_examples(path, "criteo")], np.float64)
    mean = log_loss(running_mean_probabilities(labels), labels)
    starts = [example for example, _ in literal[0]] + [len(labels)]
    by_entry = [mean[a:b].sum() for a, b in itertools.pairwise(starts)]
    np.testing.assert_allclose(result.baseline_losses, by_entry, rtol=1e-12)
