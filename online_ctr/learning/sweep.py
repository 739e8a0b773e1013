"""A group of configurations that promotes its own challengers, replayed offline: the twin of
a service's group (:mod:`online_ctr.learning.promotion`) on a click log.

Every configuration learns every example in stream order, each predicted before it is learned
(progressive validation), so each example gives every model a loss. The first configuration
serves first, as a service's group is served by its first model. Each example is one *unit*:
every challenger is paired with the serving model on it, and after every example
:func:`~online_ctr.learning.promotion.promotes` decides, with ``K = configurations - 1``
challengers (Bonferroni). On a promotion the winner serves from the next example on, every
tally starts again against it, and the model it replaced becomes a challenger. When several
challengers cross on the same example, the one with the highest lower bound wins.

The bounds after every example are computed in closed form, a batch at a time (running sums,
shifted by each tally's mean), and the crossing they find is confirmed by ``promotes`` on the
tally itself.

>>> policy = PromotionPolicy(margin=0.0, confidence=0.95, min_examples=10, planned_units=100)
>>> group = Group(configurations=2, policy=policy)
>>> champion = np.full(400, 0.50)
>>> group.add(np.vstack([champion, champion - np.tile([0.05, -0.03], 200)]))
>>> [(served.example, served.configuration) for served in group.timeline]
[(0, 0), (141, 1)]
>>> group.serving, group.paired[0].units  # the old champion, now a challenger
(1, 259)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import Batch
from online_ctr.learning.promotion import (
    Paired,
    PromotionPolicy,
    alpha_each,
    promotes,
    rho_squared,
    scores,
)

Array = NDArray[np.float64]


def radii(units: Array, alpha: float, planned_units: int) -> Array:
    """:func:`~online_ctr.learning.promotion.radius` for many unit counts at once."""
    r2 = rho_squared(alpha, planned_units)
    grown = units * r2 + 1.0
    return np.sqrt(grown / r2 * (2.0 * math.log(1.0 / alpha) + np.log(grown)))


def lower_bounds(
    tallies: Sequence[Paired], y: Array, alpha: float, planned_units: int
) -> tuple[Array, Array]:
    """Each tally's lower bound after each next unit of its scores ``y`` (a row per tally,
    all tallies of one length), and the unit counts then: what
    :meth:`~online_ctr.learning.promotion.Paired.lower_bound` would say after every unit."""
    before = tallies[0].units if tallies else 0
    units = before + np.arange(1.0, y.shape[1] + 1.0)
    mean_before = np.array([[tally.mean] for tally in tallies]).reshape(-1, 1)
    m2_before = np.array([[tally.m2] for tally in tallies]).reshape(-1, 1)
    z = y - mean_before  # shifted by the tally's mean: the running sums stay small
    z_sum = np.cumsum(z, axis=1)
    mean = mean_before + z_sum / units
    m2 = m2_before + np.cumsum(z * z, axis=1) - z_sum * z_sum / units
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(np.maximum(m2, 0.0) / (units - 1.0))
        lower = mean - sd * radii(units, alpha, planned_units) / units
    return np.where(units >= 2, lower, -np.inf), units


@dataclass(frozen=True)
class Served:
    """From which example on (counting from 0) a configuration served, and the tally that
    promoted it (``None`` for the first)."""

    example: int
    configuration: int
    paired: Paired | None = None


class Group:
    """Configurations learning the same stream: which one serves, each challenger's tally
    against it, and the loss of what the group answered."""

    def __init__(self, configurations: int, policy: PromotionPolicy) -> None:
        if configurations < 1:
            raise ValueError("a group needs at least one configuration")
        self.policy = policy
        self.serving = 0
        self.paired = [Paired() for _ in range(configurations)]
        self.timeline = [Served(0, 0)]
        self.examples = 0
        #: Per entry of the timeline, the summed loss of its predictions while it served.
        self.served_losses = [0.0]

    def add(self, losses: Array) -> None:
        """Every configuration's loss on each next example: a row per configuration."""
        start = 0
        while start < losses.shape[1]:
            start += self._until_promotion(losses[:, start:])

    def _until_promotion(self, losses: Array) -> int:
        """Pair the examples up to the first promotion (all of them if none); how many."""
        challengers = [c for c in range(len(self.paired)) if c != self.serving]
        champion = losses[self.serving]
        alpha = alpha_each(self.policy, len(challengers))
        y = scores(champion, losses[challengers], self.policy.margin)
        tallies = [self.paired[c] for c in challengers]
        lower, units = lower_bounds(tallies, y, alpha, self.policy.planned_units)
        crossing = (lower > 0.0) & (units >= self.policy.min_examples)
        hits = np.flatnonzero(crossing.any(axis=0))
        used = int(hits[0]) + 1 if len(hits) else len(champion)
        ones = np.ones(used, np.int64)
        for c in challengers:
            self.paired[c] = self.paired[c].add(
                champion[:used], losses[c, :used], ones, self.policy.margin
            )
        self.served_losses[-1] += float(champion[:used].sum())
        self.examples += used
        if len(hits):
            at = used - 1  # the highest lower bound of those that cross there
            best = challengers[int(np.argmax(np.where(crossing[:, at], lower[:, at], -np.inf)))]
            if promotes(self.paired[best], self.policy, len(challengers)):
                self._promote(best)
        return used

    def _promote(self, winner: int) -> None:
        self.timeline.append(Served(self.examples, winner, self.paired[winner]))
        self.serving = winner
        self.paired = [Paired() for _ in self.paired]
        self.served_losses.append(0.0)

    @property
    def served_logloss(self) -> float:
        """The mean loss of the serving model's predictions, example by example."""
        return sum(self.served_losses) / self.examples if self.examples else math.nan


class MeanBaseline:
    """Always predicting the running mean click rate, ``(clicks before t + 1/2) / (t + 1)``
    before example ``t`` (Krichevsky-Trofimov, as ``loadtests.bench.baseline``), scored like a
    model."""

    def __init__(self) -> None:
        self.examples = 0
        self.clicks = 0.0
        self.loss = 0.0

    def add(self, labels: Array) -> Array:
        """The next examples' labels, 0 or 1; their losses."""
        y = np.asarray(labels, dtype=np.float64)
        before = self.clicks + np.concatenate(([0.0], np.cumsum(y)[:-1]))
        p = (before + 0.5) / (self.examples + np.arange(len(y)) + 1.0)
        losses: Array = -(y * np.log(p) + (1.0 - y) * np.log1p(-p))
        self.loss += float(losses.sum())
        self.examples += len(y)
        self.clicks += float(y.sum())
        return losses

    @property
    def logloss(self) -> float:
        return self.loss / self.examples if self.examples else math.nan

    @property
    def overall_logloss(self) -> float:
        """The loss of the one constant known only at the end: the whole stream's click rate."""
        rate = self.clicks / self.examples if self.examples else math.nan
        if rate in (0.0, 1.0):
            return 0.0
        return -(rate * math.log(rate) + (1.0 - rate) * math.log1p(-rate))


class Losses(Protocol):
    """What a learned batch must give: each example's loss, predicted before learning it."""

    @property
    def losses(self) -> Array: ...


class Learner(Protocol):
    """A model that learns a batch: :class:`~online_ctr.learning.model.InMemoryModel`."""

    def learn(self, batch: Batch) -> Losses: ...


@dataclass(frozen=True)
class SweepResult:
    """Each configuration's progressive log loss, the group's and the baseline's; per entry
    of the group's timeline, the baseline's summed loss on the examples it served."""

    examples: int
    positives: int
    logloss: list[float]
    group: Group
    baseline: MeanBaseline
    baseline_losses: list[float]


def sweep(
    batches: Iterable[Batch | Sequence[Batch]],
    models: Sequence[Learner],
    policy: PromotionPolicy,
    on_batch: Callable[[Group], None] | None = None,
) -> SweepResult:
    """Learn ``batches`` with every model, the first one serving, promoting as ``policy``
    says after every example. Each of ``batches`` is one batch for every model, or a batch
    per model: the same examples hashed as each model hashes them (its crosses)."""
    group, baseline = Group(len(models), policy), MeanBaseline()
    loss, baseline_losses = np.zeros(len(models)), [0.0]
    for given in batches:
        each = [given] * len(models) if isinstance(given, Batch) else list(given)
        batch = each[0]
        first = group.examples
        losses = np.vstack(
            [model.learn(one).losses for model, one in zip(models, each, strict=True)]
        )
        loss += losses.sum(axis=1)
        group.add(losses)
        baseline_losses = _by_entry(baseline_losses, first, baseline.add(batch.labels), group)
        if on_batch is not None:
            on_batch(group)
    n = group.examples
    logloss = (loss / n if n else np.full(len(models), math.nan)).tolist()
    return SweepResult(n, int(baseline.clicks), logloss, group, baseline, baseline_losses)


def _by_entry(sums: list[float], first: int, losses: Array, group: Group) -> list[float]:
    """``sums`` (per entry of the group's timeline) with the losses of the examples from
    ``first`` on added to the entry that served each."""
    starts = [served.example for served in group.timeline]
    served_by = np.searchsorted(starts, first + np.arange(len(losses)), side="right") - 1
    added = np.bincount(served_by, weights=losses, minlength=len(starts)).tolist()
    before = sums + [0.0] * (len(starts) - len(sums))
    return [a + b for a, b in zip(before, added, strict=True)]
