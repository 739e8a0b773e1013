"""The sparsity-accuracy frontier of a rule's l1 sweep, and the seeds' claim tested on it.

A sweep gives points ``(nonzero weights, progressive log loss)``. A rule's frontier is the
lower-left envelope of its points (a point with more weights and no lower loss than another
is dropped), joined by straight lines in ``log10(nonzeros)``: "the lowest log loss the rule
reaches with this many weights". Two rules are compared at matched nonzero counts on a
log-spaced grid over the range both frontiers cover.

The claim (``docs/algorithms.md``, "What the seeds claim") is about each rule at a *tuned*
l1. Tuned here means: the fewest weights at which the rule's frontier comes within
``slack`` (relative) of the rule's own best log loss, the usual "largest l1 that costs at most
so much accuracy". Then, with ``(N_rda, L_rda)`` and ``(N_fobos, L_fobos)`` the tuned points:

- FOBOS is more accurate but less sparse than RDA: ``L_fobos < L_rda`` and
  ``N_fobos > N_rda``;
- FTRL reaches RDA's sparsity at FOBOS's accuracy: FTRL's frontier at ``N_rda`` is at most
  ``L_fobos + tolerance``. ``gap_closed`` says how much of the way from RDA's to FOBOS's
  accuracy FTRL gets at RDA's sparsity (1 = all of it);
- L1-SGD is barely sparse: at every swept l1 it keeps at least ``dense_share`` of the weights
  it tracks.

:attr:`Verdict.outcome` grades the whole claim.

>>> rda = [Point(100, 0.50), Point(1000, 0.48), Point(10000, 0.479)]
>>> round(loss_at(rda, 316.2), 4), loss_at(rda, 50)
(0.49, None)
>>> round(weights_at(rda, 0.49), 1)
316.2
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: A tuned point costs at most this much log loss, relative to the rule's best.
SLACK = 0.002
#: "At FOBOS's accuracy" allows this much log loss above it (the issue's VW tolerance).
TOLERANCE = 2e-4
#: "Partly": FTRL at RDA's sparsity is at least this share of the way to FOBOS's accuracy,
#: that is closer to FOBOS's accuracy than to RDA's.
PARTLY = 0.5
#: "Barely sparse" keeps at least this share of the tracked weights nonzero.
DENSE_SHARE = 0.9


@dataclass(frozen=True)
class Point:
    """One run of a sweep: its nonzero weights at the end and its progressive log loss."""

    nonzeros: int
    logloss: float


@dataclass(frozen=True)
class Tuned:
    """A rule's tuned operating point: its best log loss, and the fewest weights within slack."""

    best_logloss: float
    logloss: float
    nonzeros: float


@dataclass(frozen=True)
class Matched:
    """``a - b`` in log loss at matched nonzero counts over ``[low, high]``."""

    low: float
    high: float
    mean_difference: float
    share_a_lower: float


def envelope(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both counts, by increasing nonzeros.

    >>> envelope([Point(10, 0.5), Point(20, 0.6), Point(30, 0.4), Point(10, 0.45)])
    [Point(nonzeros=10, logloss=0.45), Point(nonzeros=30, logloss=0.4)]
    """
    out: list[Point] = []
    for point in sorted(points, key=lambda p: (p.nonzeros, p.logloss)):
        if point.nonzeros > 0 and (not out or point.logloss < out[-1].logloss):
            out.append(point)
    return out


def loss_at(points: Sequence[Point], nonzeros: float) -> float | None:
    """The frontier's log loss at ``nonzeros`` weights; ``None`` outside the points' range."""
    front = envelope(points)
    if not front or not front[0].nonzeros <= nonzeros <= front[-1].nonzeros:
        return None
    x = [math.log10(p.nonzeros) for p in front]
    return float(np.interp(math.log10(nonzeros), x, [p.logloss for p in front]))


def weights_at(points: Sequence[Point], logloss: float) -> float | None:
    """The fewest weights at which the frontier reaches ``logloss``; ``None`` if it never does.

    Along the envelope log loss strictly falls as weights grow, so this inverts
    :func:`loss_at`.
    """
    front = envelope(points)
    if not front or logloss < front[-1].logloss:
        return None
    if logloss >= front[0].logloss:
        return float(front[0].nonzeros)
    losses = [p.logloss for p in reversed(front)]
    x = [math.log10(p.nonzeros) for p in reversed(front)]
    return float(10 ** np.interp(logloss, losses, x))


def tuned(points: Sequence[Point], slack: float) -> Tuned:
    """The fewest weights within ``slack`` (relative) of the rule's best log loss."""
    best = min(p.logloss for p in points)
    target = best * (1.0 + slack)
    nonzeros = weights_at(points, target)
    if nonzeros is None:  # unreachable: the best point itself is within slack
        raise ValueError("no point within slack")
    return Tuned(best, target, nonzeros)


def matched(a: Sequence[Point], b: Sequence[Point], grid: int = 21) -> Matched | None:
    """Compare two frontiers at ``grid`` log-spaced nonzero counts both cover."""
    fa, fb = envelope(a), envelope(b)
    if not fa or not fb:
        return None
    low = max(fa[0].nonzeros, fb[0].nonzeros)
    high = min(fa[-1].nonzeros, fb[-1].nonzeros)
    if low > high:
        return None
    counts = np.geomspace(low, high, grid) if high > low else np.array([float(low)])
    differences = []
    for n in counts:
        la, lb = loss_at(fa, float(n)), loss_at(fb, float(n))
        if la is not None and lb is not None:
            differences.append(la - lb)
    d = np.array(differences)
    return Matched(float(low), float(high), float(d.mean()), float(np.mean(d < 0)))


@dataclass(frozen=True)
class Verdict:
    """The seeds' claim on one dataset, part by part, from the sweep's numbers."""

    rda: Tuned
    fobos: Tuned
    ftrl_at_rda_sparsity: float | None
    gap_closed: float | None
    fobos_more_accurate: bool
    fobos_less_sparse: bool
    ftrl_reaches: bool | None
    l1sgd_min_share: float
    l1sgd_barely_sparse: bool
    ftrl_vs_rda: Matched | None
    ftrl_vs_fobos: Matched | None

    @property
    def outcome(self) -> str:
        """``reproduced`` if every part holds; ``partly reproduced`` if the other parts hold
        and FTRL at RDA's sparsity gets at least :data:`PARTLY` of the way to FOBOS's accuracy;
        ``undetermined`` if FTRL's sweep misses RDA's weight count; else ``not reproduced``."""
        if self.ftrl_reaches is None:
            return "undetermined"
        others = self.fobos_more_accurate and self.fobos_less_sparse and self.l1sgd_barely_sparse
        if others and self.ftrl_reaches:
            return "reproduced"
        if others and self.gap_closed is not None and self.gap_closed >= PARTLY:
            return "partly reproduced"
        return "not reproduced"


def verdict(
    sweeps: Mapping[str, Sequence[Point]],
    l1sgd_shares: Sequence[float],
    slack: float = SLACK,
    tolerance: float = TOLERANCE,
    dense_share: float = DENSE_SHARE,
) -> Verdict:
    """Test the claim on ``sweeps`` (rule -> points); ``l1sgd_shares`` = nonzeros / tracked."""
    rda, fobos = tuned(sweeps["rda"], slack), tuned(sweeps["fobos"], slack)
    ftrl = loss_at(sweeps["ftrl"], rda.nonzeros)
    gap = rda.logloss - fobos.logloss
    # Only meaningful when FOBOS is the more accurate of the two.
    closed = None if ftrl is None or gap <= 0 else (rda.logloss - ftrl) / gap
    shares = min(l1sgd_shares)
    return Verdict(
        rda=rda,
        fobos=fobos,
        ftrl_at_rda_sparsity=ftrl,
        gap_closed=closed,
        fobos_more_accurate=fobos.logloss < rda.logloss,
        fobos_less_sparse=fobos.nonzeros > rda.nonzeros,
        ftrl_reaches=None if ftrl is None else ftrl <= fobos.logloss + tolerance,
        l1sgd_min_share=shares,
        l1sgd_barely_sparse=shares >= dense_share,
        ftrl_vs_rda=matched(sweeps["ftrl"], sweeps["rda"]),
        ftrl_vs_fobos=matched(sweeps["ftrl"], sweeps["fobos"]),
    )
