"""The rules' closed forms are the argmins they claim to be (algorithms.md, seed 000).

Each closed form minimizes a one-dimensional convex objective ``a w + b |w| + c w^2 / 2``.
Two independent checks per random state: a numeric minimizer (scipy's bounded Brent), and the
exact optimality condition ``0 in a + b d|w| + c w`` evaluated on both sides of the kink.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from online_ctr.learning.rules import fobos, ftrl, rda
from tests.core.rule_oracles import soft_threshold

EPS = float(np.finfo(np.float64).eps)

Objective = Callable[[float], float]


def numeric_argmin(objective: Objective, scale: float) -> float:
    """Brent's bounded minimizer on ``[-2 scale, 2 scale]``, absolute tolerance 1e-13."""
    radius = 2.0 * scale + 1e-3
    result = minimize_scalar(
        objective, bounds=(-radius, radius), method="bounded", options={"xatol": 1e-13}
    )
    assert result.success
    return float(result.x)


def assert_numeric_argmin(w: float, objective: Objective, scale: float) -> None:
    """``w`` agrees with the numeric argmin; ``scale`` bounds ``|w|`` (the unpenalized argmin).

    A float objective cannot locate its minimizer better than about ``sqrt(eps) scale``: near
    the minimum ``f`` changes by ``c d^2 / 2``, which is invisible below ``eps |f|``, and
    ``|f| <~ c scale^2``; Brent's bounded method also stops once its bracket is below
    ``sqrt(eps) |x| + xatol / 3``. So allow ``2e-7 scale`` (about 13 ``sqrt(eps)``, both
    effects with room) plus 1e-12 for the absolute floor when the argmin is 0.
    """
    found = numeric_argmin(objective, scale)
    assert abs(found - w) <= 2e-7 * scale + 1e-12, (w, found, scale)
    # The closed form is at least as good as what the search found, up to rounding of f.
    assert objective(w) <= objective(found) + 4 * EPS * (abs(objective(found)) + 1.0)


def assert_optimal(w: float, a: float, b: float, c: float) -> None:
    """``w`` satisfies the subgradient condition of ``a w + b |w| + c w^2 / 2``.

    At ``w != 0`` the derivative ``a + b sgn(w) + c w`` vanishes; the closed forms take a
    handful of correctly rounded operations, each off by at most half an ulp of its result,
    so the residual is a few ``eps`` times ``|a| + b``: allow 16 ``eps (|a| + b)``. At ``w = 0``
    the slopes on both sides of the kink, ``a - b`` (left) and ``a + b`` (right), must have
    opposite signs or vanish, which is ``|a| <= b``; allow the same rounding slack.
    """
    slack = 16 * EPS * (abs(a) + b)
    if w == 0.0:
        assert a - b <= slack and a + b >= -slack, (a, b)
    else:
        assert abs(a + b * np.sign(w) + c * w) <= slack, (w, a, b, c)
        assert np.sign(w) == -np.sign(a)


def random_cases(rng: np.random.Generator, size: int) -> list[tuple[int, float, float]]:
    """``(seed, gradient-like, l1-like)``, with exact ties, zeros and both signs forced in."""
    b = rng.choice([0.0, 0.1, 1.0, 3.0], size=size) * rng.uniform(0.5, 2.0, size=size)
    a = rng.normal(scale=3.0, size=size)
    a[::7] = b[::7]  # |a| exactly at the threshold: the kink
    a[1::7] = -b[1::7]
    a[2::7] = 0.0
    a[3::7] = b[3::7] * (1 + 4 * EPS)  # just outside the threshold
    return list(zip(range(size), a.tolist(), b.tolist(), strict=True))


CASES = random_cases(np.random.default_rng(20240601), 140)


@pytest.mark.parametrize(("seed", "z", "l1"), CASES)
def test_ftrl_weight_is_argmin_of_its_objective(seed: int, z: float, l1: float) -> None:
    rng = np.random.default_rng(seed)
    n = [0.0, rng.exponential(5.0), 1e6 * rng.random()][seed % 3]  # n = 0: no data yet
    params = ftrl.FTRLParams(
        alpha=float(rng.uniform(0.01, 1.0)),
        beta=float(rng.uniform(0.1, 2.0)),
        l1=l1,
        l2=float(rng.choice([0.0, rng.uniform(0.0, 2.0)])),
    )
    w = float(ftrl.RULE.weights(np.array([[z, n]]), 1, params)[0])
    c = params.l2 + (params.beta + np.sqrt(n)) / params.alpha

    def objective(x: float) -> float:
        return z * x + l1 * abs(x) + 0.5 * c * x * x

    assert_optimal(w, z, l1, c)
    assert_numeric_argmin(w, objective, abs(z) / c)


@pytest.mark.parametrize(("seed", "v", "threshold"), CASES)
def test_soft_threshold_is_argmin_of_proximal_objective(
    seed: int, v: float, threshold: float
) -> None:
    w = float(soft_threshold(np.array([v]), threshold)[0])

    def objective(x: float) -> float:
        return 0.5 * (x - v) ** 2 + threshold * abs(x)

    # 0.5 (x - v)^2 = 0.5 x^2 - v x + const: a = -v, c = 1.
    assert_optimal(w, -v, threshold, 1.0)
    assert_numeric_argmin(w, objective, abs(v))


@pytest.mark.parametrize(("seed", "g", "l1"), CASES)
def test_fobos_update_is_gradient_step_then_proximal_argmin(seed: int, g: float, l1: float) -> None:
    rng = np.random.default_rng(seed)
    params = fobos.FOBOSParams(
        alpha=float(rng.uniform(0.05, 1.0)), beta=float(rng.uniform(0.1, 2.0)), l1=l1
    )
    w0, n0, t = float(rng.normal()), [0.0, rng.exponential(4.0)][seed % 2], 17
    state = np.array([[w0, n0, t - 1.0]])  # touched on the previous step: nothing pending
    w = float(fobos.RULE.update(state, np.array([g]), np.array([g * g]), t, params)[0, 0])
    eta = params.alpha / (params.beta + np.sqrt(n0 + g * g))
    v = w0 - eta * g

    def objective(x: float) -> float:
        return 0.5 * (x - v) ** 2 + eta * l1 * abs(x)

    assert_optimal(w, -v, eta * l1, 1.0)
    assert_numeric_argmin(w, objective, abs(v))


@pytest.mark.parametrize(("seed", "gbar", "l1"), CASES)
def test_rda_weight_is_argmin_of_dual_average_objective(seed: int, gbar: float, l1: float) -> None:
    rng = np.random.default_rng(seed)
    t = int(rng.choice([1, 2, 37, 10_000]))
    params = rda.RDAParams(l1=l1, gamma=float(rng.uniform(0.1, 5.0)))
    # z = gbar t is exact for these t only up to rounding; use the quotient the rule sees.
    z = gbar * t
    a = z / t
    w = float(rda.RULE.weights(np.array([[z]]), t, params)[0])
    c = params.gamma / np.sqrt(t)

    def objective(x: float) -> float:
        return a * x + l1 * abs(x) + 0.5 * c * x * x

    assert_optimal(w, a, l1, c)
    assert_numeric_argmin(w, objective, abs(a) / c)


def test_cases_cover_the_edges() -> None:
    """The random cases include the kink from both sides, zero, and l1 = 0."""
    cases = np.array(CASES)
    a, b = cases[:, 1], cases[:, 2]
    assert np.any((np.abs(a) == b) & (b > 0))
    assert np.any((np.abs(a) > b) & (np.abs(a) < b * (1 + 8 * EPS)))
    assert np.any(a == 0.0)
    assert np.any(b == 0.0)


def test_ftrl_with_no_data_and_no_damping_is_zero_without_warnings() -> None:
    """n = 0, beta = l2 = 0: the closed form's denominator is 0, but z = 0 masks it."""
    params = ftrl.FTRLParams(alpha=0.1, beta=0.0, l1=0.0, l2=0.0)
    assert ftrl.RULE.weights(np.zeros((3, 2)), 0, params).tolist() == [0.0, 0.0, 0.0]
