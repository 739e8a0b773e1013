"""The base-rate prior: each prediction's logit starts from the stream's click rate so far.

Every rule starts from all weights 0, so p = 0.5, and the bias coordinate, learned at the
same per-coordinate rate as every feature, needs thousands of examples to reach
``logit(0.003) = -5.8`` on real ad traffic; progressive loss pays for each of them, and the
model predicts worse than a constant and sums to more clicks than there are. With a base-rate
prior the logit is

    prior_t + sum_i w_i x_i,     prior_t = log((c_t + 1/2) / (m_t - c_t + 1/2)),

the log-odds of the running click rate ``(c_t + 1/2) / (m_t + 1)`` over the examples before
the ``t+1``-th, each counted by its importance weight ``v`` (so negative sampling and a
``weight`` leave it unbiased): ``c <- d c + v y`` and ``m <- d m + v`` after each example,
``d = 1`` for the plain mean (``mean``) and ``d = 2^(-1/H)`` for a half-life of ``H``
examples (``decay:H``, for drifting traffic). The weights, the bias among them, learn the
residual with the usual gradient ``(p - y) x``: as the logit offset McMahan et al. 2013 use
for a prior model's prediction (section 4.1's base model), here the constant model of the
running mean (the Krichevsky-Trofimov estimator). ``off`` adds nothing, as before.

The prior is a pure function of the stream before each example, so the compiled learner keeps
``(c, m)`` beside the weights and the service equals ``online-ctr replay`` bit for bit.

>>> prior = BaseRate.parse("mean")
>>> state = prior.start()
>>> prior.logit(state)  # nothing seen: p = 1/2
0.0
>>> state = prior.after(state, labels=[1.0, 0.0, 0.0], weights=[1.0, 1.0, 1.0])
>>> state.tolist(), round(prior.logit(state), 6)  # (1 + 1/2) / (3 + 1): log(1.5 / 2.5)
([1.0, 3.0], -0.510826)
>>> BaseRate.parse("decay:1").after(state, [1.0], [1.0]).tolist()  # d = 1/2
[1.5, 2.5]
>>> BaseRate.parse("off").logit(state)
0.0
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

#: What the setting does, as the settings and the API describe it.
SETTING = (
    "The base-rate prior added to every prediction's logit: 'mean' (the log-odds of the "
    "model's importance-weighted click rate so far, smoothed by a half click in a whole "
    "example), 'decay:H' (the same with a half-life of H examples, for drifting traffic) or "
    "'off' (the weights alone, as models created before it)."
)
#: The longest half-life: past it the decay rounds to 1 in float64 anyway.
MOST_HALF_LIFE = 1 << 40


@dataclass(frozen=True)
class BaseRate:
    """A model's base-rate prior: ``kind`` ``off``, ``mean`` or ``decay`` (with
    ``half_life`` examples)."""

    kind: str = "mean"
    half_life: int = 0

    @staticmethod
    def parse(text: str) -> BaseRate:
        """``off``, ``mean`` or ``decay:H``; a ValueError saying what is valid otherwise."""
        if text in ("off", "mean"):
            return BaseRate(text)
        kind, _, half_life = text.partition(":")
        if kind == "decay" and half_life.isdigit() and 1 <= int(half_life) <= MOST_HALF_LIFE:
            return BaseRate("decay", int(half_life))
        raise ValueError(
            "the base-rate prior must be 'off', 'mean' or 'decay:H' with H a whole number of "
            f"examples from 1 to 2^40; got {text!r}"
        )

    @property
    def text(self) -> str:
        """The setting as :meth:`parse` reads it."""
        return f"decay:{self.half_life}" if self.kind == "decay" else self.kind

    @property
    def decay(self) -> float:
        """``d``, what ``(c, m)`` are multiplied by before each example is added."""
        return 0.5 ** (1.0 / self.half_life) if self.kind == "decay" else 1.0

    def start(self) -> Array:
        """The state ``(c, m)`` of a model that has seen nothing."""
        return np.zeros(2)

    def logit(self, state: Array | tuple[float, float]) -> float:
        """The offset added to the logit of the next example (0.0 with ``off``)."""
        return 0.0 if self.kind == "off" else offset(float(state[0]), float(state[1]))

    def after(self, state: Array, labels: Iterable[float], weights: Iterable[float]) -> Array:
        """The state after ``labels`` (each of importance ``weights``), as the learner keeps
        it, one example at a time (each ``off`` model counts too: it costs nothing)."""
        c, m, d = float(state[0]), float(state[1]), self.decay
        for y, v in zip(labels, weights, strict=True):
            c, m = c * d + y * v, m * d + v
        return np.array([c, m])

    def kernel(self, state: Array) -> Array:
        """What :func:`online_ctr.learning.kernels.learner` takes: ``(on, d, c, m)``, its last
        two updated in place."""
        return np.array([float(self.kind != "off"), self.decay, state[0], state[1]])


#: The prior of a new model: the best of the three on every shared click log
#: (``docs/benchmarks.md``, its quality section).
MEAN = BaseRate("mean")


def offset(clicks: float, examples: float) -> float:
    """``log((c + 1/2) / (m - c + 1/2))``: the log-odds of the smoothed rate, written as
    the kernel computes it, op for op."""
    return math.log((clicks + 0.5) / (examples - clicks + 0.5))


def check_state(clicks: float, examples: float) -> tuple[float, float]:
    """``(c, m)`` if they are a state the learner can leave (finite, ``0 <= c <= m``), else a
    ValueError naming what is wrong."""
    if not (math.isfinite(clicks) and math.isfinite(examples) and 0.0 <= clicks <= examples):
        raise ValueError(
            "the base rate's clicks and examples must be finite with 0 <= clicks <= examples; "
            f"got {clicks!r} and {examples!r}"
        )
    return clicks, examples
