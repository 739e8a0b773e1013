"""When a challenger's progressive log loss is lower than the champion's: a sequential test on
the paired loss differences, safe to look at after every example.

Every model of a group learns the same examples, so each example (or each ``/learn`` call,
a *unit*) gives a pair: the champion's and the challenger's progressive log loss on it, each
made before that model learned the unit (McMahan et al. 2013, section 5.1). With a relative
``margin`` m, a unit's score is

    y = (L_champion - L_challenger) - m * L_champion

(sums over the unit's examples), and the challenger is better by the margin when the mean of
``y`` is above 0. The test is a confidence sequence for that mean, the normal-mixture boundary
of Robbins (1970) in the asymptotic form of Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas
(2021, "Time-uniform central limit theory and asymptotic confidence sequences", Theorem 2.2):
after ``t`` units with sum ``S`` and sample standard deviation ``s``,

    S > s * sqrt((t rho^2 + 1) / rho^2 * (2 log(1 / a) + log(t rho^2 + 1)))

is crossed by a group whose challenger is not better with probability at most ``a`` over the
*whole* stream, however often it is checked (asymptotically in ``t``: the boundary is
Gaussian-approximated; :data:`PromotionPolicy.min_examples` keeps the first units out).
``rho`` makes the boundary tightest near :data:`PromotionPolicy.planned_units` units. With K
challengers each is tested at ``a = (1 - confidence) / K`` (Bonferroni), so a group promotes a
model that is not better by the margin with probability at most ``1 - confidence``.

>>> policy = PromotionPolicy(margin=0.0, confidence=0.95, min_examples=10, planned_units=100)
>>> champion = np.full(400, 0.50)
>>> challenger = champion - np.tile([0.05, -0.03], 200)  # lower by 0.01 on average
>>> paired = Paired().add(champion, challenger, np.ones(400, np.int64), policy.margin)
>>> paired.units, round(paired.relative_gain, 4), promotes(paired, policy, challengers=1)
(400, 0.02, True)
>>> promotes(Paired().add(champion, champion, np.ones(400, np.int64), 0.0), policy, 1)
False
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class PromotionPolicy:
    """When a group's challenger replaces its serving model."""

    #: Relative: the challenger's loss must be below ``(1 - margin)`` times the champion's.
    margin: float = 0.001
    #: 1 - the chance that the group ever promotes a model that is not better by the margin.
    confidence: float = 0.95
    #: Paired examples a challenger needs before it can be promoted.
    min_examples: int = 1_000
    #: The boundary is tightest near this many paired units.
    planned_units: int = 10_000

    def __post_init__(self) -> None:
        if not (0.0 <= self.margin < 1.0):
            raise ValueError(f"margin must be in [0, 1), not {self.margin!r}")
        if not (0.5 <= self.confidence < 1.0):
            raise ValueError(f"confidence must be in [0.5, 1), not {self.confidence!r}")
        if self.min_examples < 1 or self.planned_units < 1:
            raise ValueError("min_examples and planned_units must be at least 1")


@dataclass(frozen=True)
class Paired:
    """A challenger against the champion on the units both learned: counts, the mean and the
    centred sum of squares of the scores ``y`` (Welford), and both losses' sums."""

    units: int = 0
    examples: int = 0
    mean: float = 0.0
    m2: float = 0.0
    champion_loss: float = 0.0
    challenger_loss: float = 0.0

    def add(
        self,
        champion: NDArray[np.float64],
        challenger: NDArray[np.float64],
        examples: NDArray[np.int64],
        margin: float,
    ) -> Paired:
        """With more units: each one's loss sums and example count, in stream order."""
        if len(champion) == 0:
            return self
        y = scores(champion, challenger, margin)
        n_b, mean_b = len(y), float(y.mean())
        m2_b = float(np.sum((y - mean_b) ** 2))
        n = self.units + n_b
        delta = mean_b - self.mean
        # Chan, Golub and LeVeque's merge of two (count, mean, M2) summaries.
        return Paired(
            units=n,
            examples=self.examples + int(examples.sum()),
            mean=self.mean + delta * n_b / n,
            m2=self.m2 + m2_b + delta * delta * self.units * n_b / n,
            champion_loss=self.champion_loss + float(champion.sum()),
            challenger_loss=self.challenger_loss + float(challenger.sum()),
        )

    @property
    def relative_gain(self) -> float:
        """How much lower the challenger's loss is, as a fraction of the champion's."""
        if self.champion_loss <= 0.0:
            return 0.0
        return (self.champion_loss - self.challenger_loss) / self.champion_loss

    def lower_bound(self, alpha: float, planned_units: int) -> float:
        """The confidence sequence's lower bound on the mean score (-inf below 2 units)."""
        if self.units < 2:
            return -math.inf
        sd = math.sqrt(self.m2 / (self.units - 1))
        return self.mean - sd * radius(self.units, alpha, planned_units) / self.units

    def as_tuple(self) -> tuple[int, int, float, float, float, float]:
        return (
            self.units,
            self.examples,
            self.mean,
            self.m2,
            self.champion_loss,
            self.challenger_loss,
        )


def scores(
    champion: NDArray[np.float64], challenger: NDArray[np.float64], margin: float
) -> NDArray[np.float64]:
    """Per unit ``(L_champion - L_challenger) - margin * L_champion``."""
    return (champion - challenger) - margin * champion


def rho_squared(alpha: float, planned_units: int) -> float:
    """The mixture's variance that makes the boundary tightest at ``planned_units``
    (Waudby-Smith et al. 2021, equation 13)."""
    log_term = -2.0 * math.log(alpha)
    return (log_term + math.log(log_term + 1.0)) / planned_units


def radius(units: int, alpha: float, planned_units: int) -> float:
    """The boundary on the standardized sum after ``units`` units."""
    r2 = rho_squared(alpha, planned_units)
    grown = units * r2 + 1.0
    return math.sqrt(grown / r2 * (2.0 * math.log(1.0 / alpha) + math.log(grown)))


def alpha_each(policy: PromotionPolicy, challengers: int) -> float:
    """Each challenger's error rate: the group's, split evenly (Bonferroni)."""
    return (1.0 - policy.confidence) / max(challengers, 1)


def promotes(paired: Paired, policy: PromotionPolicy, challengers: int) -> bool:
    """Whether the challenger is better than the champion by the margin, confidently."""
    if paired.examples < policy.min_examples:
        return False
    alpha = alpha_each(policy, challengers)
    return paired.lower_bound(alpha, policy.planned_units) > 0.0


def expected_units(mean: float, sd: float, policy: PromotionPolicy, challengers: int) -> int:
    """The units after which a challenger whose scores have this ``mean`` (> 0) and ``sd``
    crosses the boundary on average: the least ``t`` with ``t * mean > sd * radius(t)``.

    >>> expected_units(0.01, 0.1, PromotionPolicy(planned_units=1000), 1)
    922
    """
    if mean <= 0.0:
        raise ValueError("a challenger that is not better is never expected to be promoted")
    alpha = alpha_each(policy, challengers)
    low, high = 1, 2
    while high * mean <= sd * radius(high, alpha, policy.planned_units):
        low, high = high, high * 2
    while low < high:  # the least t that crosses: t * mean grows faster than the radius
        middle = (low + high) // 2
        if middle * mean > sd * radius(middle, alpha, policy.planned_units):
            high = middle
        else:
            low = middle + 1
    return low
