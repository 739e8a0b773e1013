"""The compiled per-example loop behind :func:`online_ctr.learning.sequential.learn_sequential`, and
each rule's scalar math.

Why numba: each example is scored with the state the previous one left, so numpy cannot
vectorize the loop over examples, and Python costs microseconds per feature. Each function
mirrors the numpy function of :mod:`online_ctr.learning.rules` named in its docstring operation for
operation (same floating-point operations in the same order), so the two agree bit for bit;
the numpy modules stay the readable reference. ``state`` is the rule's ``(k, fields)`` array,
``i`` a row, ``p`` the hyper-parameters in the order of :data:`KERNELS`, ``t`` a float step.

All of it lives in this one module on purpose: numba's disk cache is refreshed when the
cached function's source file changes, not when a function it calls from another file does.
``error_model="numpy"`` gives IEEE results (inf, nan) where Python would raise, as numpy does.

>>> state, p = np.zeros((1, 2)), np.array([0.1, 1.0, 0.0, 0.0])  # FTRL, l1 = l2 = 0
>>> _ftrl_update(state, 0, -0.5, 0.25, 1.0, p)
>>> state, _ftrl_weight(state, 0, p)  # w = -z / ((beta + sqrt(n)) / alpha)
(array([[-0.5 ,  0.25]]), 0.03333333333333333)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
from numba import njit
from numpy.typing import NDArray

Array = NDArray[np.float64]
Function = TypeVar("Function", bound=Callable[..., Any])

FTRL, RDA, FOBOS, TG, TRUNCATION, L1SGD = range(6)

# The compact encoding's constants (online_ctr.learning.compact), as globals numba folds in.
_FRACTION, _WEIGHT_MIN, _WEIGHT_MAX = 8192.0, -32768.0, 32767.0
_N_MANTISSA, _N_LINEAR, _N_BIAS, _N_MAX = 1024, 2.0**-33, 24, 65535
_GOLDEN, _MIX1, _MIX2 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)
_S11, _S22, _S27, _S30, _S31 = (np.uint64(s) for s in (11, 22, 27, 30, 31))

#: Per rule name: the kernel's code, and the hyper-parameters in the order ``p`` holds them.
KERNELS: dict[str, tuple[int, tuple[str, ...]]] = {
    "ftrl": (FTRL, ("alpha", "beta", "l1", "l2")),
    "rda": (RDA, ("l1", "gamma")),
    "fobos": (FOBOS, ("alpha", "beta", "l1")),
    "tg": (TG, ("alpha", "beta", "l1", "theta", "k")),
    "truncation": (TRUNCATION, ("alpha", "beta", "theta", "k")),
    "l1sgd": (L1SGD, ("alpha", "beta", "l1")),
}


def _skip_blas_probe() -> None:
    """Spare every process numba's BLAS probe: the first use of its CPU target imports
    ``numba.np.arraymath``, which imports ``scipy.linalg.cython_blas`` to learn whether
    ``np.dot`` can call a BLAS. Where SciPy is installed that import is ``scipy.linalg`` and what
    it pulls in: ~0.15 s of start-up (``online-ctr replay`` of 200,000 Criteo rows, the whole
    process: 1.34-1.41 s before, 1.20-1.22 s after). Nothing compiled here uses a BLAS (no
    ``np.dot``, ``@`` or ``np.linalg``; were one added, numba would refuse to compile it and the
    tests would say so). So arraymath is imported while that one module is marked absent
    (``None`` in ``sys.modules`` makes importing it raise ImportError, which numba takes for
    "no BLAS"), and the mark is removed at once: SciPy and whatever else uses cython_blas import
    as before. Where either module is loaded already, there is nothing to spare."""
    blas = "scipy.linalg.cython_blas"
    if "numba.np.arraymath" in sys.modules or blas in sys.modules:
        return
    sys.modules[blas] = None  # type: ignore[assignment]
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules[blas]


_skip_blas_probe()


def _helper(function: Function) -> Function:
    """A function compiled into the compiled functions that call it (the cache keeps those)."""
    return cast(Function, njit(error_model="numpy")(function))


def _inlined(function: Function) -> Function:
    """A helper that numba copies into each call site, where its constant arguments fold."""
    return cast(Function, njit(inline="always", error_model="numpy")(function))


def _compiled(function: Function) -> Function:
    """Compile on the first call and cache the machine code on disk for the next process;
    where numba finds no writable cache directory it refuses ``cache=True`` outright, and
    compiling in every process is better than failing to import."""
    try:
        return cast(Function, njit(cache=True, error_model="numpy")(function))
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return cast(Function, njit(error_model="numpy")(function))


#: The same three, for compiled loops of other modules (their own source file keys their cache).
compiled = _compiled
helper = _helper
inlined = _inlined


@_helper
def _sign(v: float) -> float:
    """``np.sign``: 0.0 for either zero, nan for nan."""
    if v > 0.0:
        return 1.0
    if v < 0.0:
        return -1.0
    return 0.0 if v == 0.0 else v


@_helper
def _soft_threshold(v: float, a: float) -> float:
    """``rules.base.soft_threshold``; ``np.maximum`` propagates nan, hence the comparison."""
    shrunk = abs(v) - a
    return _sign(v) * (0.0 if shrunk < 0.0 else shrunk)


@_helper
def _rate(n: float, alpha: float, beta: float) -> float:
    """``rules.base.adaptive_rate``."""
    return alpha / (beta + math.sqrt(n))


@_helper
def _ftrl_weight(state: Array, i: int, p: Array) -> float:
    """``rules.ftrl.weights`` (McMahan et al. 2013, Algorithm 1); it ignores the step."""
    alpha, beta, l1, l2 = p[0], p[1], p[2], p[3]
    z, n = state[i, 0], state[i, 1]
    if abs(z) <= l1:
        return 0.0
    w: float = -(z - _sign(z) * l1) / ((beta + math.sqrt(n)) / alpha + l2)
    return w


@_helper
def _ftrl_update(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """``rules.ftrl.update``."""
    z, n = state[i, 0], state[i, 1]
    w = _ftrl_weight(state, i, p)
    sigma = (math.sqrt(n + g2) - math.sqrt(n)) / p[0]
    state[i, 0] = z + g - sigma * w
    state[i, 1] = n + g2


@_helper
def _rda_weight(state: Array, i: int, t: float, p: Array) -> float:
    """``rules.rda.weights`` (Xiao 2010, with ``beta_t = gamma sqrt(t)``)."""
    l1, gamma = p[0], p[1]
    steps = max(t, 1.0)
    gbar = state[i, 0] / steps
    if abs(gbar) <= l1 or t == 0.0:
        return 0.0
    w: float = -(math.sqrt(steps) / gamma) * (gbar - l1 * _sign(gbar))
    return w


@_helper
def _fobos_weight(state: Array, i: int, t: float, p: Array) -> float:
    """``rules.fobos.weights`` (Duchi & Singer 2009, applied lazily), with
    ``_pending_penalty`` written out."""
    alpha, beta, l1 = p[0], p[1], p[2]
    penalty = (t - state[i, 2]) * (_rate(state[i, 1], alpha, beta) * l1)
    return _soft_threshold(state[i, 0], penalty)


@_helper
def _fobos_update(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """``rules.fobos.update``."""
    alpha, beta, l1 = p[0], p[1], p[2]
    w = _fobos_weight(state, i, t - 1.0, p)
    n = state[i, 1] + g2
    eta = _rate(n, alpha, beta)
    state[i, 0] = _soft_threshold(w - eta * g, eta * l1)
    state[i, 1] = n
    state[i, 2] = t


@_helper
def _tg_truncate(v: float, a: float, theta: float) -> float:
    """``rules.tg.truncate``: ``T1(v, a, theta)``."""
    return _soft_threshold(v, a) if abs(v) <= theta else v


@_helper
def _tg_gravity(n: float, p: Array) -> float:
    """``rules.tg._gravity``: ``k eta_i l1``."""
    a: float = p[4] * _rate(n, p[0], p[1]) * p[2]
    return a


@_helper
def _tg_weight(state: Array, i: int, t: float, p: Array) -> float:
    """``rules.tg.weights`` (Langford, Li & Zhang 2009, applied lazily), with ``_events``
    written out: float floor division, as numpy's."""
    k = p[4]
    events = t // k - state[i, 2] // k
    return _tg_truncate(state[i, 0], events * _tg_gravity(state[i, 1], p), p[3])


@_helper
def _tg_update(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """``rules.tg.update``."""
    w = _tg_weight(state, i, t - 1.0, p)
    n = state[i, 1] + g2
    v = w - _rate(n, p[0], p[1]) * g
    if t % p[4] == 0.0:
        v = _tg_truncate(v, _tg_gravity(n, p), p[3])
    state[i, 0], state[i, 1], state[i, 2] = v, n, t


@_helper
def _truncation_weight(state: Array, i: int, t: float, p: Array) -> float:
    """``rules.truncation.weights`` (Langford, Li & Zhang 2009, section 3.1), with
    ``_next_event`` written out."""
    theta, k = p[2], p[3]
    w: float = state[i, 0]
    if (state[i, 2] // k + 1.0) * k <= t and abs(w) <= theta:
        return 0.0
    return w


@_helper
def _truncation_update(state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """``rules.truncation.update``, with ``T0`` written out."""
    w = _truncation_weight(state, i, t - 1.0, p)
    n = state[i, 1] + g2
    v = w - _rate(n, p[0], p[1]) * g
    if t % p[3] == 0.0 and abs(v) <= p[2]:
        v = 0.0
    state[i, 0], state[i, 1], state[i, 2] = v, n, t


@_helper
def _l1sgd_update(state: Array, i: int, g: float, g2: float, p: Array) -> None:
    """``rules.l1sgd.update`` (seed 001); its weight is stored."""
    w = state[i, 0]
    n = state[i, 1] + g2
    state[i, 0] = w - _rate(n, p[0], p[1]) * (g + p[2] * _sign(w))
    state[i, 1] = n


@_helper
def _weight(rule: int, state: Array, i: int, t: float, p: Array) -> float:
    """``rules[rule].weights`` for row ``i`` at step ``t``."""
    if rule == FTRL:
        return _ftrl_weight(state, i, p)
    if rule == RDA:
        return _rda_weight(state, i, t, p)
    if rule == FOBOS:
        return _fobos_weight(state, i, t, p)
    if rule == TG:
        return _tg_weight(state, i, t, p)
    if rule == TRUNCATION:
        return _truncation_weight(state, i, t, p)
    w: float = state[i, 0]  # L1-SGD stores its weight
    return w


@_helper
def _update(rule: int, state: Array, i: int, g: float, g2: float, t: float, p: Array) -> None:
    """``rules[rule].update`` of row ``i`` with one example's gradient, as step ``t``."""
    if rule == FTRL:
        _ftrl_update(state, i, g, g2, t, p)
    elif rule == RDA:
        state[i, 0] += g  # rules.rda.update: z sums the gradients
    elif rule == FOBOS:
        _fobos_update(state, i, g, g2, t, p)
    elif rule == TG:
        _tg_update(state, i, g, g2, t, p)
    elif rule == TRUNCATION:
        _truncation_update(state, i, g, g2, t, p)
    else:
        _l1sgd_update(state, i, g, g2, p)


@_helper
def _mix(x: np.uint64) -> np.uint64:
    """``compact._mix``: SplitMix64's output function."""
    x = x + _GOLDEN
    x = (x ^ (x >> _S30)) * _MIX1
    x = (x ^ (x >> _S27)) * _MIX2
    return x ^ (x >> _S31)


@_helper
def _round_weight(v: float, r: float) -> float:
    """``compact.round_weight`` then ``weight_value``: ``v`` on the q2.13 grid."""
    x = v * _FRACTION
    if x != x:
        x = 0.0
    x = min(max(x, _WEIGHT_MIN), _WEIGHT_MAX)
    code = min(max(float(math.floor(x + r)), _WEIGHT_MIN), _WEIGHT_MAX)
    return code / _FRACTION


@_helper
def _round_n(n: float, r: float) -> float:
    """``compact.round_n`` then ``n_value``: ``n`` on its 16-bit grid."""
    if not n > 0.0:  # also nan
        n = 0.0
    if n == math.inf:
        code = _N_MAX
    elif n < _N_MANTISSA * _N_LINEAR:
        code = math.floor(n / _N_LINEAR + r)
    else:
        mantissa, exponent = math.frexp(n)
        fraction = (mantissa * 2.0 - 1.0) * _N_MANTISSA
        code = (exponent - 1 + _N_BIAS) * _N_MANTISSA + math.floor(fraction + r)
    code = min(code, _N_MAX)
    if code < _N_MANTISSA:
        return code * _N_LINEAR
    high = code & (_N_MANTISSA - 1)
    return math.ldexp(float(_N_MANTISSA + high), (code >> 10) - _N_BIAS - 10)


@_helper
def _quantize(rule: int, state: Array, i: int, feature: np.uint64, step: int, p: Array) -> None:
    """``compact.CompactCodec.quantize`` of row ``i``, just updated as ``step``."""
    h = _mix(feature ^ _mix(np.uint64(step)))
    r_weight = float(h >> _S11) * 2.0**-53
    r_n = float(_mix(h) >> _S22) * 2.0**-42
    n = _round_n(state[i, 1], r_n)
    scale = _rate(n, p[0], p[1]) if rule == FTRL else 1.0
    state[i, 0] = _round_weight(state[i, 0] * scale, r_weight) / scale
    state[i, 1] = n


@_inlined
def _learn(
    rule: int,
    compact: bool,
    p: Array,
    state: Array,
    t: int,
    logit_clip: float,
    indptr: NDArray[np.int64],
    inverse: NDArray[np.intp],
    values: Array,
    labels: Array,
    ids: NDArray[np.uint64],
) -> tuple[Array, Array]:
    """:func:`learn_examples` for one ``rule`` and encoding (``compact``), constants once
    inlined there, so that the compiler drops the other rules' branches from the loop: several
    times faster than testing ``rule`` for every feature."""
    examples = len(indptr) - 1
    logits, probabilities = np.empty(examples), np.empty(examples)
    for j in range(examples):
        step = float(t + j)
        s = 0.0  # summed in the stored order, as np.bincount sums in learner.logits
        for k in range(indptr[j], indptr[j + 1]):
            s += _weight(rule, state, inverse[k], step, p) * values[k]
        clipped = min(max(s, -logit_clip), logit_clip)
        probability = 1.0 / (1.0 + math.exp(-clipped))
        logits[j], probabilities[j] = s, probability
        residual = probability - labels[j]
        for k in range(indptr[j], indptr[j + 1]):
            g = residual * values[k]
            _update(rule, state, inverse[k], g, g * g, step + 1.0, p)
            if compact:
                _quantize(rule, state, inverse[k], ids[inverse[k]], t + j + 1, p)
    return logits, probabilities


@_compiled
def learn_examples(
    rule: int,
    p: Array,
    state: Array,
    t: int,
    logit_clip: float,
    indptr: NDArray[np.int64],
    inverse: NDArray[np.intp],
    values: Array,
    labels: Array,
    ids: NDArray[np.uint64],
    compact: bool,
) -> tuple[Array, Array]:
    """Predict then learn each example in turn, updating ``state`` in place; returns the
    logits (unclipped) and probabilities. Mirrors ``learner.score`` and ``rule.update`` at B = 1;
    with ``compact``, each updated row is then rounded as ``compact.CompactCodec.quantize``
    (``ids`` are the rows' feature ids, which seed its randomness).
    """
    if compact:  # a constant in each branch, as the rule: the float64 loop never tests it
        if rule == FTRL:
            return _learn(FTRL, True, p, state, t, logit_clip, indptr, inverse, values, labels, ids)
        # L1-SGD, the only other rule with a compact form (learn_sequential checks it)
        return _learn(L1SGD, True, p, state, t, logit_clip, indptr, inverse, values, labels, ids)
    if rule == FTRL:
        return _learn(FTRL, False, p, state, t, logit_clip, indptr, inverse, values, labels, ids)
    if rule == RDA:
        return _learn(RDA, False, p, state, t, logit_clip, indptr, inverse, values, labels, ids)
    if rule == FOBOS:
        return _learn(FOBOS, False, p, state, t, logit_clip, indptr, inverse, values, labels, ids)
    if rule == TG:
        return _learn(TG, False, p, state, t, logit_clip, indptr, inverse, values, labels, ids)
    if rule == TRUNCATION:
        return _learn(
            TRUNCATION, False, p, state, t, logit_clip, indptr, inverse, values, labels, ids
        )
    return _learn(L1SGD, False, p, state, t, logit_clip, indptr, inverse, values, labels, ids)
