"""Calibration of served probabilities: McMahan et al.'s ``gamma p^kappa``, fitted online.

"Ad Click Prediction: a View from the Trenches" (KDD 2013), section 7: a model's predictions
can be systematically off, and a correction ``tau(p) = gamma p^kappa`` is fitted to the
model's own predictions by Poisson regression on aggregated data,
``log E[y | p] = log gamma + kappa log p``.

The aggregate here is a histogram of the progressive predictions (each example's raw ``p``,
made before the model learned it): per bin of ``log p`` (:data:`WIDTH` wide, from 0 down to
-35, where the logit clip puts the smallest ``p``) its examples ``C``, clicks ``Y`` and sum of
``log p``, ``S``. Each example is added in stream order, so the histogram after a stream is
the same floats whatever groups it was learned in. The fit is the maximum of the Poisson
log likelihood over the bins, each bin at its mean ``L = S / C``,

    sum_b  Y_b (a + kappa L_b) - C_b exp(a + kappa L_b)  -  (PRIOR / 2) ((a - c)^2 + (kappa - 1)^2)

with ``c`` the mean ``log p``, found by Newton's method from the identity (``a`` is
``log gamma`` with ``log p`` centred on ``c``, which keeps the two coordinates nearly
orthogonal), subject to ``kappa >= 0``: a negative ``kappa`` would turn the model's ranking
upside down, so where the data say the predictions carry no signal the fit is a constant
(``kappa = 0``). The small ridge towards the identity keeps the fit finite before the first
click.
At the optimum (up to that ridge) ``sum q = sum y`` over the stream: the expected/observed
ratio is 1. The fit is a pure function of the histogram, so the worker (which refits at every
commit) and the in-process replay agree. It weighs the whole stream alike: it does not forget.
The model always learns from the raw ``p``; calibration only changes what is served.

>>> stats = Histogram.empty().add(np.full(400, 0.5), np.tile([1.0, 0.0, 0.0, 0.0], 100))
>>> fit = stats.fit()
>>> round(float(fit.apply(np.array([0.5]))[0]), 3), round(fit.kappa, 3)
(0.252, 1.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.stream_metrics import StreamMetrics, log_loss

Array = NDArray[np.float64]
Calibration = Literal["off", "power"]
#: The calibrations there are; the first is the default.
CALIBRATIONS: tuple[Calibration, ...] = ("off", "power")

#: Bin width in ``log p``: within a bin ``p^kappa`` varies by about ``kappa * WIDTH``, so
#: taking a bin at its mean ``log p`` moves the fit's sums by about ``(kappa WIDTH)^2 / 24``.
WIDTH = 0.05
#: Bins from ``log p = 0`` down to -35 (the logit clip): the histogram's size is fixed.
BINS = 700
#: Weight of the ridge towards the identity: about one example's worth.
PRIOR = 1.0
#: Served probabilities stay where the model's own can be: sigmoid of the logit clip, +-35.
LOW, HIGH = 1.0 / (1.0 + math.exp(35.0)), 1.0 / (1.0 + math.exp(-35.0))


@dataclass(frozen=True)
class PowerFit:
    """``q = gamma p^kappa``, with ``log_gamma`` kept as the log."""

    log_gamma: float = 0.0
    kappa: float = 1.0

    @property
    def gamma(self) -> float:
        return math.exp(self.log_gamma)

    def apply(self, p: Array) -> Array:
        """The calibrated probabilities of raw ``p``, clipped into ``[LOW, HIGH]``."""
        return np.clip(np.exp(self.log_gamma + self.kappa * np.log(p)), LOW, HIGH)


@dataclass(frozen=True)
class Histogram:
    """Per bin of ``log p``: examples, clicks and the sum of ``log p``; rows ``(C, Y, S)``."""

    sums: Array

    @classmethod
    def empty(cls) -> Histogram:
        return cls(np.zeros((3, BINS)))

    def add(self, p: Array, y: Array, w: Array | None = None) -> Histogram:
        """The histogram with the examples ``(p, y)`` added one by one, in order; each
        counted ``w`` times if given (importance weights: a negatively sampled stream's
        histogram then estimates the whole stream's, and so does its fit)."""
        log_p = np.log(np.asarray(p, dtype=np.float64))
        bins = np.minimum((-log_p / WIDTH).astype(np.intp), BINS - 1)
        labels = np.asarray(y, dtype=np.float64)
        sums = self.sums.copy()
        # ufunc.at adds unbuffered, element by element in order: the same floats as adding
        # the examples one at a time, however the stream was cut into groups.
        if w is None:
            np.add.at(sums[0], bins, 1.0)
            np.add.at(sums[1], bins, labels)
            np.add.at(sums[2], bins, log_p)
        else:
            np.add.at(sums[0], bins, w)
            np.add.at(sums[1], bins, w * labels)
            np.add.at(sums[2], bins, w * log_p)
        return Histogram(sums)

    def fit(self, iterations: int = 50) -> PowerFit:
        """The penalized Poisson maximum over the bins (see the module doc)."""
        used = self.sums[0] > 0
        count, clicks, sum_log = self.sums[0][used], self.sums[1][used], self.sums[2][used]
        if not len(count):
            return PowerFit()
        centre = float(sum_log.sum() / count.sum())
        x = sum_log / count - centre
        objective = _Objective(x, count, clicks, np.array([centre, 1.0]))
        # log q = a + kappa x, x = log p centred; from the identity.
        a, kappa = objective.maximize(objective.identity, iterations, free=2).tolist()
        if kappa < 0:
            # A negative kappa would serve the model's ranking upside down; the maximum with
            # kappa >= 0 is then on kappa = 0 (the objective is concave): a constant CTR.
            a, kappa = objective.maximize(np.array([a, 0.0]), iterations, free=1).tolist()
        return PowerFit(a - kappa * centre, kappa)


class Calibrator:
    """The learner's side in process: the histogram, the fit served and the progressive
    metrics of the calibrated predictions (each scored with the fit from before its batch)."""

    def __init__(self) -> None:
        self.histogram = Histogram.empty()
        self.fit = PowerFit()
        self.metrics = StreamMetrics()

    def learn(self, p: Array, y: Array, w: Array | None = None) -> None:
        """Score a batch's raw progressive predictions ``p``, then refit with them; ``w``:
        the examples' importance weights, if any (the worker weighs both alike)."""
        q = self.fit.apply(p)
        self.metrics.add(q, y, log_loss(q, y), w)
        self.histogram = self.histogram.add(p, y, w)
        self.fit = self.histogram.fit()


@dataclass(frozen=True)
class _Objective:
    """The penalized Poisson log likelihood over the used bins, at their centred mean."""

    x: Array
    count: Array
    clicks: Array
    identity: Array

    def value(self, theta: Array) -> float:
        eta = theta[0] + theta[1] * self.x
        ridge = 0.5 * PRIOR * float(((theta - self.identity) ** 2).sum())
        return float((self.clicks * eta - self.count * _exp(eta)).sum()) - ridge

    def maximize(self, theta: Array, iterations: int, free: int) -> Array:
        """Newton's method from ``theta`` over its first ``free`` coordinates (the others
        stay as they are), until a step moves less than 1e-12."""
        for _ in range(iterations):
            theta, moved = self.improve(theta, free)
            if moved < 1e-12:
                break
        return theta

    def improve(self, theta: Array, free: int) -> tuple[Array, float]:
        """One Newton step, halved until the objective does not decrease; and its size."""
        mu = self.count * _exp(theta[0] + theta[1] * self.x)
        residual = self.clicks - mu
        gradient = np.array([residual.sum(), (residual * self.x).sum()])
        gradient -= PRIOR * (theta - self.identity)
        mx = float((mu * self.x).sum())
        hessian = np.array([[mu.sum(), mx], [mx, float((mu * self.x**2).sum())]])
        hessian += PRIOR * np.eye(2)  # concave: this (minus the Hessian) is positive definite
        step = np.zeros(2)
        step[:free] = np.linalg.solve(hessian[:free, :free], gradient[:free])
        start = self.value(theta)
        for _ in range(30):
            if self.value(theta + step) >= start:
                break
            step = step / 2
        return theta + step, float(np.abs(step).max())


def _exp(eta: Array) -> Array:
    """``exp``, capped far above any probability so that a wild step cannot overflow."""
    return np.exp(np.minimum(eta, 30.0))
