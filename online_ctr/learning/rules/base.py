"""What every learning rule provides, and the small pieces of math they share.

A rule works on the per-feature state of the features present in a mini-batch: a float64
array ``state`` of shape ``(k, len(rule.fields))``, one row per feature, one column per state
field (FTRL: ``z``, ``n``). Nothing here mutates its inputs; every function returns new arrays.

The global step ``t`` is the number of examples the model has learned from. ``weights(state,
t)`` gives the weights used to predict example ``t + 1``; ``update(state, g, g2, t)`` applies a
mini-batch whose last example is example ``t`` (so a batch of B examples that starts after
``t0`` examples passes ``t = t0 + B``), with ``g`` and ``g2`` the per-feature sums of the
gradients and of their squares over the batch.

Each rule writes that math once, per row: ``weight_of(state, i, t, p)`` and ``update_row(state,
i, g, g2, t, p)``, with ``p`` the hyper-parameters in the order of the rule's parameter class.
They are plain Python on floats, in the subset numba compiles, and marked :func:`scalar` together
with every function of theirs they call. :mod:`online_ctr.learning.kernels` compiles from them
both the sequential learner and the array forms :meth:`Rule.weights` and :meth:`Rule.update`
call; it is imported on the first such call, so importing the rules never loads numba (the
command line parses its arguments before). The numpy array math the rules were first written
in is kept as the tests' oracle (``tests/core/rule_oracles.py``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from online_ctr.learning.kernels import RowMath

Array = NDArray[np.float64]
Step = float | Array

#: Largest step we ever schedule an expiry at: float64 represents every integer below it.
NEVER = float("inf")
#: Steps are kept as float64 (Redis's Lua writes them with '%.17g'): every whole number below
#: this is exact, and no step a model can reach is above it.
MAX_STEP = 2**53
#: What a state field's name means, the same in every rule: ``n`` is a sum of squared
#: gradients, ``t_last`` the step of the feature's last touch.
SUMS_OF_SQUARES = frozenset({"n"})
STEP_FIELDS = frozenset({"t_last"})


def adaptive_rate(n: Array, alpha: float, beta: float) -> Array:
    """Per-coordinate learning rate ``eta_i = alpha / (beta + sqrt(n_i))`` (McMahan et al. 2013).

    >>> adaptive_rate(np.array([0.0, 9.0]), alpha=0.1, beta=1.0)
    array([0.1  , 0.025])
    """
    return alpha / (beta + np.sqrt(n))


#: The attribute :func:`scalar` sets: the kernels compile a function that has it.
SCALAR = "__scalar__"
ScalarFn = TypeVar("ScalarFn", bound=Callable[..., Any])


def scalar(function: ScalarFn) -> ScalarFn:
    """Mark ``function`` as math on floats and state rows that numba can compile: the
    compiled learner compiles it, and every function so marked that it calls."""
    setattr(function, SCALAR, True)
    return function


@scalar
def sign(v: float) -> float:
    """``np.sign`` of one float: 0.0 for either zero, nan for nan.

    >>> sign(-2.0), sign(0.0), sign(3.0)
    (-1.0, 0.0, 1.0)
    """
    if v > 0.0:
        return 1.0
    if v < 0.0:
        return -1.0
    return 0.0 if v == 0.0 else v


@scalar
def shrink(v: float, a: float) -> float:
    """``S_a(v) = sgn(v) max(0, |v| - a)``, the proximal map of ``a |v|``; nan gives nan.

    >>> shrink(-3.0, 1.0), shrink(0.5, 1.0)
    (-2.0, 0.0)
    """
    shrunk = abs(v) - a
    return sign(v) * (0.0 if shrunk < 0.0 else shrunk)


@scalar
def rate(n: float, alpha: float, beta: float) -> float:
    """:func:`adaptive_rate` of one ``n``.

    >>> rate(9.0, alpha=0.1, beta=1.0)
    0.025
    """
    return alpha / (beta + math.sqrt(n))


def require(condition: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``condition``: validation for hyper-parameters."""
    if not condition:
        raise ValueError(message)


def require_period(k: int) -> None:
    """A truncation period: a whole number of steps, at least 1."""
    require(k >= 1 and float(k).is_integer(), f"k must be an integer >= 1, got {k}")


@dataclass(frozen=True)
class AdaptiveRateParams:
    """Hyper-parameters of :func:`adaptive_rate`, shared by the SGD-style rules."""

    alpha: float = 0.1
    beta: float = 1.0

    def __post_init__(self) -> None:
        require(self.alpha > 0, f"alpha must be > 0, got {self.alpha}")
        # beta = 0 gives a feature with n = 0 an infinite rate, and NaN weights.
        require(self.beta > 0, f"beta must be > 0, got {self.beta}")


@dataclass(frozen=True)
class AdaptiveL1Params(AdaptiveRateParams):
    """Adaptive rates and an L1 strength ``l1``."""

    l1: float = 1e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.l1 >= 0, f"l1 must be >= 0, got {self.l1}")


WeightsFn = Callable[[Array, Step, Any], Array]
RatesFn = Callable[[Array, int, Any], Array]
ExpiryFn = Callable[[Array, int, Any], Array]
#: ``weight_of(state, i, t, p)`` and ``update_row(state, i, g, g2, t, p)``, see the module.
RowWeightFn = Callable[[Array, int, float, Array], float]
RowUpdateFn = Callable[[Array, int, float, float, float, Array], None]


@dataclass(frozen=True)
class Rule:
    """A learning rule: its state layout, hyper-parameter class, its per-row math (``weight_of``,
    ``update_row``) and two pure functions on arrays (``expiry``, ``rates``). Its array math,
    :meth:`weights` and :meth:`update`, is the row math compiled over the rows.

    ``expiry(state, t, params)`` gives, for each feature whose weight at step ``t`` is nonzero,
    the first step ``s > t`` at which its weight is exactly zero if the feature is not touched
    again (``inf`` if never). Untouched weights only ever move towards zero in every rule here,
    so this is what an exact nonzero-weight count needs to know.

    ``rates(state, t, params)`` gives each feature's step size ``eta_i``: how far its weight
    can move per unit of gradient in the update after step ``t``. The uncertainty of a
    prediction (:func:`uncertainty`, McMahan et al. 2013, section 6) is ``sum_i x_i^2 eta_i``.
    """

    name: str
    title: str
    fields: tuple[str, ...]
    params_type: type[Any]
    expiry: ExpiryFn
    rates: RatesFn
    weight_of: RowWeightFn
    update_row: RowUpdateFn

    def params(self, **values: float) -> Any:
        """Build this rule's hyper-parameters, ignoring names the rule does not use."""
        known = {f.name for f in fields(self.params_type)}
        return self.params_type(**{k: v for k, v in values.items() if k in known})

    def weights(self, state: Array, t: Step, params: Any) -> Array:
        """The weights of the rows of ``state`` after step ``t`` (one step, or one per row):
        ``weight_of`` of each row."""
        if isinstance(t, int | float):  # one step: the common case, one array made
            steps = np.array((t,), np.float64)
        else:
            steps = _operand(np.asarray(t, dtype=np.float64).reshape(-1))
        return _compiled(self).weights(_operand(state), steps, _packed(params))

    def update(self, state: Array, g: Array, g2: Array, t: int, params: Any) -> Array:
        """New state after a mini-batch ending at step ``t`` with per-row gradient sums ``g``
        and sums of squares ``g2``: ``update_row`` of each row; ``state`` is left alone."""
        return _compiled(self).update(
            _operand(state), _operand(g), _operand(g2), float(t), _packed(params)
        )

    def kernel_params(self, params: Any) -> Array:
        """The hyper-parameters as ``weight_of`` and ``update_row`` read them: floats in the
        order of the parameter class's fields."""
        return np.array([float(getattr(params, f.name)) for f in fields(self.params_type)])

    def zeros(self, k: int) -> Array:
        """The state of ``k`` features never seen before."""
        return np.zeros((k, len(self.fields)))

    def state_problem(self, state: Array) -> tuple[int, str, str] | None:
        """The first row of ``state`` that no learning can produce, as (row, field, what the
        field must be); None if every row is one. Every value is finite, a sum of squares
        ``>= 0``, a step a whole number in ``[0, 2^53)``.

        >>> toy = Rule("toy", "", ("w", "n", "t_last"), object, *[never_expires] * 4)
        >>> toy.state_problem(np.array([[0.5, 1.0, 3.0], [0.5, -1.0, 3.0]]))
        (1, 'n', 'a sum of squared gradients, >= 0')
        >>> toy.state_problem(np.array([[0.5, 1.0, 3.0]])) is None
        True
        """
        first: tuple[int, str, str] | None = None
        for column, name in enumerate(self.fields):
            bad = ~_field_ok(name, state[:, column])
            if bad.any() and (first is None or int(bad.argmax()) < first[0]):
                first = (int(bad.argmax()), name, _FIELD_RULES.get(name, "a finite number"))
        return first

    def latest_step(self, state: Array) -> float:
        """The latest step any row of ``state`` was touched at (0 if it keeps no steps)."""
        columns = [i for i, name in enumerate(self.fields) if name in STEP_FIELDS]
        return float(state[:, columns].max()) if columns and len(state) else 0.0


#: Per rule name, its compiled array math (``kernels.RowMath``), once loaded.
_COMPILED: dict[str, RowMath] = {}


def _compiled(rule: Rule) -> RowMath:
    """``kernels.row_math(rule)``: imported on the first call, so that importing the rules
    never loads numba, and looked up here after (an import statement costs ~0.7 us a call)."""
    compiled = _COMPILED.get(rule.name)
    if compiled is None:
        from online_ctr.learning.kernels import row_math  # numba loads at its first call

        compiled = _COMPILED[rule.name] = row_math(rule)
    return compiled


def _operand(values: Any) -> Array:
    """``values`` as the one array type the compiled loops take: float64, C-contiguous and
    writable (copied only if not). numba compiles a specialization per argument type, and a
    read-only array (state decoded from Redis bytes) or a strided one is another type: each
    would cost every process that meets it first ~1 CPU-s of compiling (29 more of them in one
    run of the test suite), for the same float operations on the same values."""
    if type(values) is np.ndarray and values.dtype == np.float64:
        flags = values.flags
        if flags.c_contiguous and flags.writeable:
            return values  # as np.require returns it, without its ~2 us of checks
    return np.require(values, np.float64, ("C", "W"))


#: The parameters :func:`_packed` was last asked for, and their array: one tuple, swapped
#: whole, so that threads never see one's parameters with another's array.
_LAST_PACKED: tuple[Any, Array | None] = (None, None)


def _packed(params: Any) -> Array:
    """:meth:`Rule.kernel_params` of ``params`` (a frozen dataclass, so hashable), built once:
    scoring a request calls :meth:`Rule.weights` with the model's same parameters every time,
    the same object, which is found first without hashing it (the cache's hash and equality
    of a dataclass are Python calls). Read-only, as it is shared."""
    global _LAST_PACKED
    last, packed = _LAST_PACKED
    if last is params and packed is not None:
        return packed
    packed = _packed_anew(params)
    _LAST_PACKED = (params, packed)
    return packed


@functools.lru_cache(maxsize=256)
def _packed_anew(params: Any) -> Array:
    p = np.array([float(getattr(params, f.name)) for f in fields(params)])
    p.flags.writeable = False
    return p


_FIELD_RULES = {
    **dict.fromkeys(SUMS_OF_SQUARES, "a sum of squared gradients, >= 0"),
    **dict.fromkeys(STEP_FIELDS, "a step, a whole number in 0..2^53"),
}


def _field_ok(name: str, values: Array) -> NDArray[np.bool_]:
    """Which ``values`` of the state field ``name`` can be: comparisons with NaN are False."""
    ok: NDArray[np.bool_] = np.isfinite(values)
    if name in SUMS_OF_SQUARES:
        ok &= values >= 0
    elif name in STEP_FIELDS:
        ok &= (values >= 0) & (values < MAX_STEP) & (values == np.floor(values))
    return ok


def per_coordinate_rates(state: Array, t: int, params: Any) -> Array:
    """``alpha / (beta + sqrt(n))`` of :func:`adaptive_rate`, for rules whose state keeps
    ``n`` (the sum of squared gradients) in its second column.

    >>> per_coordinate_rates(np.array([[0.3, 0.0], [-1.0, 9.0]]), 5, AdaptiveRateParams())
    array([0.1  , 0.025])
    """
    return adaptive_rate(state[:, 1], params.alpha, params.beta)


def uncertainty(rates: Array, rows: NDArray[np.int64], x: Array, examples: int) -> Array:
    """Per example ``u = sum_i x_i^2 eta_i`` over its (feature, value) pairs: ``rates`` per
    pair, ``rows`` the example of each pair.

    McMahan et al. 2013, section 6: the next update moves the logit by
    ``|sum_i x_i eta_i g_i|``, and ``|g_i| = |p - y| |x_i| <= |x_i|``, so by at most
    ``sum_i eta_i x_i^2``. For binary features (categories, log buckets: ``x_i = 1``) that is
    the paper's ``sum_i eta_i |x_i|``; a raw number carries its ``x`` both in the gradient and
    in the logit, hence the square.

    >>> uncertainty(np.array([0.1, 0.2, 0.5]), np.array([0, 0, 1]), np.array([1.0, -2.0, 1.0]), 2)
    array([0.9, 0.5])
    """
    u = np.bincount(rows, weights=x * x * rates, minlength=examples)
    return np.asarray(u, dtype=np.float64)


def never_expires(state: Array, t: int, params: Any) -> Array:
    """Expiry for rules whose untouched weights never change."""
    return np.full(state.shape[0], NEVER)


def first_zero_step(
    weights: WeightsFn, state: Array, t: int, params: Any, estimate: Array
) -> Array:
    """Turn an analytic estimate of when each untouched weight reaches zero into the exact step.

    The estimate comes from solving ``penalty(s) = |w|`` in real numbers; rounding can put it
    one step off the first ``s > t`` at which ``weights(state, s)`` is exactly zero. Weights are
    monotone in ``s`` for untouched features, so a short walk in each direction settles it.
    Rows whose estimate is ``inf`` get ``inf``; the contract only covers weights nonzero at ``t``.
    """
    finite = np.isfinite(estimate)
    s = np.where(finite, np.maximum(np.ceil(estimate), t + 1), NEVER)
    for _ in range(64):
        rows = np.isfinite(s) & (s > t + 1)
        if not rows.any():
            break
        early = weights(state[rows], s[rows] - 1, params) == 0
        if not early.any():
            break
        idx = np.flatnonzero(rows)[early]
        s[idx] -= 1
    for _ in range(64):
        rows = np.isfinite(s)
        late = weights(state[rows], s[rows], params) != 0
        if not late.any():
            break
        idx = np.flatnonzero(rows)[late]
        s[idx] += 1
    return s
