"""The compact state encoding: each feature's state in 4 bytes, rounded as it is learned.

McMahan et al. (2013, section 4.4) store coefficients in q2.13 fixed point (a sign, 2 integer
and 13 fraction bits: ``[-4, 4)`` in steps of ``2^-13``) with *randomized rounding*,
``floor(2^13 v + R)`` for ``R`` uniform in ``[0, 1)``, so the rounding error has zero mean and
millions of tiny steps do not drown in it; and for FTRL-Proximal they store ``eta z``, "which
has similar magnitude to w", not ``z`` itself (``z`` grows with ``sqrt(n)``). So does this:

- the *weight-bearing value* ``v`` in q2.13: FTRL's ``eta z = z alpha / (beta + sqrt(n))``,
  L1-SGD's stored weight ``w``; clipped to the range, NaN stored as 0;
- ``n`` (the sum of squared gradients, >= 0) in 16 bits as an unsigned float with a 6-bit
  exponent and a 10-bit mantissa, also randomly rounded: about 3 significant digits from
  ``2^-23`` to ``1.1e12`` (below ``2^-23`` in steps of ``2^-33``), so the learning rate keeps
  decaying for features seen billions of times (a half float would stop at 65504).

Rules whose state holds a step (FOBOS, TG, truncation) or an unscaled sum (RDA) have no such
16-bit form; they keep float64. The rounding is part of the learning math: the compiled
learner rounds each feature's state right after each update (:mod:`online_ctr.learning.kernels`
mirrors
:func:`quantize` bit for bit), so what is stored is exactly what was learned. Its randomness is
a hash of the feature id and the step, so a replay is reproducible at any batch size.

>>> codec = CompactCodec("ftrl", alpha=0.1, beta=1.0)
>>> state = np.array([[-2.5, 4.0], [0.0, 0.0]])
>>> weights, n = codec.codes(state)
>>> weights.tolist(), n.tolist()  # eta z = -2.5 * 0.1 / 3 = -0.0833 = -682.7 / 2^13
([-683, 0], [26624, 0])
>>> codec.state(weights, n)[0].tolist()  # z = -683 / 2^13 / (0.1 / 3), n = 4 exactly
[-2.501220703125, 4.0]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.splitmix import mix, uniform

Array = NDArray[np.float64]
Codes = NDArray[np.int64]

#: Rules with a compact form: their state is (weight-bearing value, n).
RULES = ("ftrl", "l1sgd")
#: Those of them whose weight-bearing value is the first field times the rate (``eta z``).
SCALED = ("ftrl",)
#: The state encodings a model may use.
ENCODINGS = ("float64", "compact")

#: q2.13: ``v = code / 2^13`` for ``code`` in ``[-2^15, 2^15)``.
FRACTION = 8192.0
WEIGHT_MIN, WEIGHT_MAX = -32768, 32767
#: ``n``: codes below 1024 are ``code * 2^-33``; above, exponent ``code >> 10`` (bias 24) and
#: mantissa ``code & 1023``. The two meet at ``2^-23`` (code 1024).
N_MANTISSA = 1024
N_LINEAR = 2.0**-33
N_BIAS = 24
N_MAX = 65535
#: Bits of the randomness that rounds ``n``, as a fraction of its last mantissa bit.
N_RANDOM_BITS = 42


def check_encoding(encoding: str, rule: str) -> None:
    """Refuse an unknown encoding, or ``compact`` for a rule without a compact form."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown state encoding {encoding!r}; choose float64 or compact")
    if encoding == "compact" and rule not in RULES:
        raise ValueError(
            f"the compact state encoding supports the rules {' and '.join(RULES)}, not "
            f"{rule!r} (its state holds a step or an unscaled sum): use float64"
        )


def round_weight(v: Array, r: Array | float) -> Codes:
    """q2.13 codes of ``v``: ``floor(2^13 v + r)``, clipped; NaN gives 0."""
    scaled = np.nan_to_num(np.asarray(v, np.float64) * FRACTION, nan=0.0)
    scaled = np.clip(scaled, WEIGHT_MIN, WEIGHT_MAX)  # also takes infinities to the edges
    return np.clip(np.floor(scaled + r), WEIGHT_MIN, WEIGHT_MAX).astype(np.int64)


def weight_value(codes: Codes) -> Array:
    return np.asarray(codes, np.float64) / FRACTION


def round_n(n: Array, r: Array | float) -> Codes:
    """16-bit codes of ``n``: its mantissa rounded to 10 bits as ``floor(f + r)``; NaN and
    negatives give 0, anything past the largest code (infinity too) the largest code."""
    n = np.nan_to_num(np.asarray(n, np.float64), nan=0.0, posinf=np.inf)
    n = np.maximum(n, 0.0)
    mantissa, exponent = np.frexp(np.where(np.isfinite(n), n, 1.0))  # n = m 2^e, m in [0.5, 1)
    fraction = (mantissa * 2.0 - 1.0) * N_MANTISSA  # the mantissa bits below the leading 1
    normal = (exponent - 1 + N_BIAS) * N_MANTISSA + np.floor(fraction + r)
    linear = np.floor(n / N_LINEAR + r)
    codes = np.where(n < N_MANTISSA * N_LINEAR, linear, normal)
    codes = np.where(np.isfinite(n), codes, N_MAX)
    return np.clip(codes, 0, N_MAX).astype(np.int64)


def n_value(codes: Codes) -> Array:
    codes = np.asarray(codes, np.int64)
    high = np.maximum(codes, N_MANTISSA)
    normal = np.ldexp(
        (N_MANTISSA + (high & (N_MANTISSA - 1))).astype(np.float64), (high >> 10) - N_BIAS - 10
    )
    return np.where(codes < N_MANTISSA, codes * N_LINEAR, normal)


def randomness(ids: NDArray[np.uint64], step: int) -> tuple[Array, Array]:
    """The rounding offsets of ``ids`` updated as step ``step``: for the weight-bearing value
    and for ``n``, each uniform in ``[0, 1)``, from a hash of the id and the step."""
    steps = np.full(len(ids), step, dtype=np.uint64)
    h = mix(np.asarray(ids, np.uint64) ^ mix(steps))
    for_weight = uniform(h)
    for_n = (mix(h) >> np.uint64(64 - N_RANDOM_BITS)).astype(np.float64) * 2.0**-N_RANDOM_BITS
    return for_weight, for_n


@dataclass(frozen=True)
class CompactCodec:
    """A rule's state to and from its compact codes (pure; the bytes are
    :mod:`online_ctr.store.layout`'s). ``alpha``, ``beta`` scale FTRL's ``z``; L1-SGD ignores
    them."""

    rule: str
    alpha: float
    beta: float

    @classmethod
    def of(cls, rule: str, params: Any) -> CompactCodec:
        check_encoding("compact", rule)
        return cls(rule, float(params.alpha), float(params.beta))

    def scale(self, n: Array) -> Array:
        """Weight-bearing value over the first state field: FTRL's ``eta``, else 1."""
        if self.rule in SCALED:
            return self.alpha / (self.beta + np.sqrt(n))  # as kernels._rate, op for op
        return np.ones_like(n)

    def codes(self, state: Array) -> tuple[Codes, Codes]:
        """Nearest codes: exact for state this encoding learned."""
        return self._codes(state, 0.5, 0.5)

    def _codes(
        self, state: Array, r_weight: Array | float, r_n: Array | float
    ) -> tuple[Codes, Codes]:
        n = round_n(state[:, 1], r_n)
        with np.errstate(divide="ignore", invalid="ignore"):  # beta = n = 0: eta is inf
            v = state[:, 0] * self.scale(n_value(n))
        return round_weight(v, r_weight), n

    def state(self, weights: Codes, n: Codes) -> Array:
        """The state rows the codes stand for."""
        n_values = n_value(n)
        return np.column_stack([weight_value(weights) / self.scale(n_values), n_values])

    def quantize(self, ids: NDArray[np.uint64], step: int, state: Array) -> Array:
        """``state`` of ``ids`` just updated as step ``step``, randomly rounded to its codes:
        the reference of what the compiled learner does after each update."""
        r_weight, r_n = randomness(ids, step)
        return self.state(*self._codes(state, r_weight, r_n))
