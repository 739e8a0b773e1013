"""Special cases in which one rule becomes another (algorithms.md; seed 000 end, seed 001 2.1.4).

- FTRL-Proximal with ``l1 = l2 = 0`` is per-coordinate SGD with ``eta_i = alpha / (beta +
  sqrt(n_i))``, ``n_i`` including the current ``g^2``.
- Truncated gradient with ``theta = inf`` and ``k = 1`` is L1-clipped SGD,
  ``w <- sgn(v) max(0, |v| - eta l1)`` with ``v = w - eta g``, on every coordinate every step.
- Truncated gradient whose per-event shrinkage ``k eta l1`` equals ``theta`` is simple
  truncation. The rates are per coordinate, so this needs the same ``eta`` for every coordinate
  at every event: it holds per step for one coordinate, or over a whole stream when ``g2 = 0``
  keeps every rate at ``alpha / beta`` (the global constant rate of the seed's statement).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from online_ctr.learning.rules import fobos, ftrl, tg, truncation
from online_ctr.learning.rules.base import Array

STEPS = 300


def sparse_gradients(seed: int, steps: int, width: int, presence: float) -> Array:
    """A ``(steps, width)`` array of gradients, each coordinate present with ``presence``."""
    rng = np.random.default_rng(seed)
    g = rng.normal(scale=rng.choice([0.1, 1.0, 5.0], size=width), size=(steps, width))
    return np.where(rng.random((steps, width)) < presence, g, 0.0)


@pytest.mark.parametrize("seed", range(5))
def test_ftrl_without_regularization_is_per_coordinate_sgd(seed: int) -> None:
    rng = np.random.default_rng(seed)
    params = ftrl.FTRLParams(
        alpha=float(rng.uniform(0.05, 1.0)), beta=float(rng.uniform(0.1, 2.0)), l1=0.0, l2=0.0
    )
    grads = sparse_gradients(seed, STEPS, width=6, presence=0.6)
    state = ftrl.RULE.zeros(6)
    w_sgd, n = np.zeros(6), np.zeros(6)
    for t, g in enumerate(grads, start=1):
        state = ftrl.RULE.update(state, g, g * g, t, params)
        n = n + g * g
        # An absent coordinate has g = 0, so it does not move however large eta is.
        w_sgd = w_sgd - params.alpha / (params.beta + np.sqrt(n)) * g
        # The identity is exact in real numbers. FTRL reaches w through z = sum of g - sigma w,
        # so each step adds a rounding of relative size eps to z, of which w is a fixed multiple:
        # after 300 steps the drift is at most a few hundred eps relative (measured: < 4e-13 at
        # worst, when w has just crossed zero). rtol 1e-11 leaves 25x room and still fails at
        # once on an O(1) slip such as a missing sigma term; atol 1e-12 only matters for a
        # weight passing within 1e-12 of zero, where a relative error means nothing.
        np.testing.assert_allclose(
            ftrl.RULE.weights(state, t, params), w_sgd, rtol=1e-11, atol=1e-12
        )
    assert np.count_nonzero(w_sgd) == 6


def l1_clipped_sgd(w: Array, g: Array, n: Array, params: tg.TGParams) -> Array:
    """Seed 001's L1-regularized SGD step, written as the seed writes it."""
    eta = params.alpha / (params.beta + np.sqrt(n))
    v = w - eta * g
    return np.where(np.abs(v) <= eta * params.l1, 0.0, v - eta * params.l1 * np.sign(v))


@pytest.mark.parametrize("presence", [1.0, 0.3])
@pytest.mark.parametrize("seed", range(4))
def test_truncated_gradient_with_infinite_theta_and_k_1_is_l1_clipped_sgd(
    seed: int, presence: float
) -> None:
    params = tg.TGParams(alpha=0.5, beta=1.0, l1=0.05, theta=math.inf, k=1)
    grads = sparse_gradients(seed, STEPS, width=8, presence=presence)
    state = tg.RULE.zeros(8)
    w, n = np.zeros(8), np.zeros(8)
    zeros_seen = 0
    for t, g in enumerate(grads, start=1):
        present = g != 0
        touched = tg.RULE.update(state[present], g[present], g[present] ** 2, t, params)
        state[present] = touched
        n = n + g * g
        w = l1_clipped_sgd(w, g, n, params)
        lazy = tg.RULE.weights(state, t, params)
        if presence == 1.0:
            # Every coordinate every step: the same operations in the same order, bit for bit.
            np.testing.assert_array_equal(lazy, w)
        else:
            # Lazily, m missed steps shrink by m * (eta l1) at once instead of m subtractions
            # of eta l1: each subtraction rounds by at most half an ulp of |w| (< 2 here), so
            # 300 steps drift by < 300 * 2 * eps ~ 1.3e-13; soft thresholds and gradient steps
            # are 1-Lipschitz, so the drift does not grow. atol 1e-12 is 8x that (measured:
            # 2.4e-15).
            np.testing.assert_allclose(lazy, w, rtol=0, atol=1e-12)
            # The drift never moves a weight across zero (no tie at rounding level).
            np.testing.assert_array_equal(lazy == 0, w == 0)
        zeros_seen += int(np.count_nonzero(w == 0) - np.count_nonzero(n == 0))
    assert zeros_seen > 0, "l1 never clipped a seen weight to zero: the case is untested"


@pytest.mark.parametrize("seed", range(4))
def test_truncated_gradient_with_infinite_theta_and_k_1_is_fobos_bit_for_bit(seed: int) -> None:
    """Both apply ``S_(m eta l1)`` lazily with the same rates: the same floats."""
    shared = {"alpha": 0.3, "beta": 1.0, "l1": 0.1}
    tg_params = tg.TGParams(**shared, theta=math.inf, k=1)
    fobos_params = fobos.FOBOSParams(**shared)
    grads = sparse_gradients(seed, STEPS, width=8, presence=0.3)
    a, b = tg.RULE.zeros(8), fobos.RULE.zeros(8)
    for t, g in enumerate(grads, start=1):
        present = g != 0
        a[present] = tg.RULE.update(a[present], g[present], g[present] ** 2, t, tg_params)
        b[present] = fobos.RULE.update(b[present], g[present], g[present] ** 2, t, fobos_params)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(
            tg.RULE.weights(a, t, tg_params), fobos.RULE.weights(b, t, fobos_params)
        )


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("seed", range(4))
def test_truncated_gradient_with_shrinkage_theta_is_simple_truncation(seed: int, k: int) -> None:
    """Constant rates (``g2 = 0``) make ``k eta l1`` one number, which we take as ``theta``.

    Dyadic ``alpha``, ``beta`` and ``l1`` make ``eta = 1/2`` and ``theta = k eta l1`` exact in
    floats, so the equality is exact: ``T1(v, theta, theta)`` is 0 where ``|v| <= theta`` and
    ``v`` elsewhere, which is ``T0(v, theta)``.
    """
    alpha, beta, l1 = 0.5, 1.0, 0.0625
    theta = k * (alpha / beta) * l1
    tg_params = tg.TGParams(alpha=alpha, beta=beta, l1=l1, theta=theta, k=k)
    tr_params = truncation.TruncationParams(alpha=alpha, beta=beta, theta=theta, k=k)
    grads = 0.2 * sparse_gradients(seed, STEPS, width=8, presence=0.3)
    a, b = tg.RULE.zeros(8), truncation.RULE.zeros(8)
    truncated, seen = 0, np.zeros(8, dtype=bool)
    for t, g in enumerate(grads, start=1):
        present = g != 0
        seen |= present
        zero = np.zeros(int(present.sum()))
        a[present] = tg.RULE.update(a[present], g[present], zero, t, tg_params)
        b[present] = truncation.RULE.update(b[present], g[present], zero, t, tr_params)
        w = tg.RULE.weights(a, t, tg_params)
        np.testing.assert_array_equal(w, truncation.RULE.weights(b, t, tr_params))
        truncated += int(np.count_nonzero((w == 0) & seen))
    assert truncated > 0, "no weight was ever truncated: the case is untested"


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("seed", range(50))
def test_truncated_gradient_step_with_matched_gravity_is_simple_truncation_step(
    seed: int, k: int
) -> None:
    """One coordinate, one step, real ``g2 = g^2``: choose ``l1`` so that ``k eta l1 = theta``.

    With ``alpha = 1`` and ``beta + sqrt(n + g^2) = 8``, ``eta = 1/8`` exactly; a dyadic ``g``
    and an integer ``root`` make ``n + g^2 = root^2`` and its square root exact too.
    """
    rng = np.random.default_rng(seed)
    root = int(rng.integers(1, 7))
    g = float(rng.choice([-1, 1]) * rng.integers(0, 16 * root + 1)) / 16
    n = root * root - g * g
    assert np.sqrt(n + g * g) == root
    beta = 8.0 - root
    theta = k * float(rng.choice([0.125, 0.25, 0.5]))
    l1 = theta / k * 8.0
    tg_params = tg.TGParams(alpha=1.0, beta=beta, l1=l1, theta=theta, k=k)
    tr_params = truncation.TruncationParams(alpha=1.0, beta=beta, theta=theta, k=k)
    t = int(rng.integers(1, 30))  # events (t % k == 0) and plain steps
    w = float(rng.normal(scale=0.5))
    state = np.array([[w, n, t - 1.0]])  # touched on the step before: nothing pending
    args = (np.array([g]), np.array([g * g]), t)
    np.testing.assert_array_equal(
        tg.RULE.update(state, *args, tg_params), truncation.RULE.update(state, *args, tr_params)
    )


def test_truncation_operators_include_theta_itself() -> None:
    """Seed 001 writes T0 and T1 on the closed intervals [0, theta] and [-theta, 0]."""
    theta, a = 0.5, 0.125
    v = np.array([-0.75, -theta, -0.0625, 0.0, 0.0625, theta, np.nextafter(theta, 1.0)])
    zero = np.zeros(len(v))
    rows = np.column_stack((v, zero, zero))  # touched at step 0, n = 0: eta = alpha / beta
    once = tg.TGParams(alpha=0.5, beta=1.0, l1=a / 0.5, theta=theta, k=1)  # k eta l1 = a
    np.testing.assert_array_equal(
        tg.RULE.update(rows, zero, zero, 1, once)[:, 0],
        [-0.75, -0.375, 0.0, 0.0, 0.0, 0.375, v[-1]],
    )
    at_events = truncation.TruncationParams(alpha=0.5, beta=1.0, theta=theta, k=1)
    np.testing.assert_array_equal(
        truncation.RULE.update(rows, zero, zero, 1, at_events)[:, 0],
        [-0.75, 0.0, 0.0, 0.0, 0.0, 0.0, v[-1]],
    )
    # Lazily too: a weight stored at exactly theta meets the next event.
    tg_params = tg.TGParams(alpha=0.5, beta=1.0, l1=0.25, theta=theta, k=2)
    state = np.array([[theta, 0.0, 1.0]])
    assert tg.RULE.weights(state, 2, tg_params)[0] == theta - 2 * 0.5 * 0.25
    tr_params = truncation.TruncationParams(alpha=0.5, beta=1.0, theta=theta, k=2)
    assert truncation.RULE.weights(state, 2, tr_params)[0] == 0.0
