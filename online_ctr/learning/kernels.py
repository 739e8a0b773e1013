"""The compiled per-example loop behind :func:`online_ctr.learning.sequential.learn_sequential`.

Why numba: each example is scored with the state the previous one left, so numpy cannot
vectorize the loop over examples, and Python costs microseconds per feature. The loop knows no
rule: :func:`learner` builds one per rule from the rule's own per-row math (``weight_of``,
``update_row`` in its module, see :mod:`online_ctr.learning.rules.base`), so a rule's math is
written in its module only; :func:`row_math` compiles from the same two functions the rule's
array forms (``Rule.weights``, ``Rule.update``: scoring, the mini-batch learner). ``state`` is
the rule's ``(k, fields)`` array, ``i`` a row, ``p`` the hyper-parameters
(``rule.kernel_params``), ``t`` a float step.

numba's disk cache is refreshed when the cached function's source file changes, not when a
function it calls from another file does; so each rule's compiled loop carries a hash of the
source files of the functions it compiles in, which numba's cache key includes.
``error_model="numpy"`` gives IEEE results (inf, nan) where Python would raise, as numpy does.
numba itself is imported only at the first call that has no precompiled form
(:mod:`online_ctr.learning.jit`, :mod:`online_ctr.learning.precompiled`).

>>> from online_ctr.learning.admission import admit_all
>>> from online_ctr.learning.retention import retaining
>>> from online_ctr.learning.rules import get_rule
>>> rule = get_rule("ftrl")
>>> p = rule.kernel_params(rule.params(alpha=0.1, beta=1.0, l1=0.0, l2=0.0))
>>> state, one = np.zeros((1, 2)), np.array([0, 1])
>>> logits, probabilities = learner(rule)(
...     p, state, 0, 35.0, one, np.zeros(1, np.intp), np.ones(1), np.ones(1), np.ones(1),
...     np.zeros(1, np.uint64), False, admit_all(), retaining(), np.array([0.0, 1, 0, 0]))
>>> probabilities, state  # g = 0.5 - 1: z = -0.5, n = 0.25
(array([0.5]), array([[-0.5 ,  0.25]]))
"""

from __future__ import annotations

import hashlib
import math
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning import jit
from online_ctr.learning.admission import POISSON_SALT, Admitting
from online_ctr.learning.compact import RULES, SCALED
from online_ctr.learning.eviction import (
    CUT_ALL,
    CUT_ZERO,
    EVICTED,
    LOWEST,
    STABLE,
    TRACKED,
    Evicting,
)
from online_ctr.learning.retention import Retaining
from online_ctr.learning.rules.base import SCALAR, RowUpdateFn, RowWeightFn, Rule

Array = NDArray[np.float64]
Function = TypeVar("Function", bound=Callable[..., Any])

# The compact encoding's constants (online_ctr.learning.compact), as globals numba folds in.
_FRACTION, _WEIGHT_MIN, _WEIGHT_MAX = 8192.0, -32768.0, 32767.0
_N_MANTISSA, _N_LINEAR, _N_BIAS, _N_MAX = 1024, 2.0**-33, 24, 65535
_GOLDEN, _MIX1, _MIX2 = (
    np.uint64(0x9E3779B97F4A7C15),
    np.uint64(0xBF58476D1CE4E5B9),
    np.uint64(0x94D049BB133111EB),
)
_S11, _S22, _S27, _S30, _S31 = (np.uint64(s) for s in (11, 22, 27, 30, 31))
_POISSON_SALT = POISSON_SALT
_LOWEST, _TRACKED, _EVICTED, _CUT_ZERO, _CUT_ALL = LOWEST, TRACKED, EVICTED, CUT_ZERO, CUT_ALL
_STABLE = STABLE


_helper, _inlined, _compiled = jit.helper, jit.inlined, jit.compiled


@_helper
def _mix(x: np.uint64) -> np.uint64:
    """:func:`online_ctr.learning.splitmix.mix` of one word."""
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
def _rate(n: float, alpha: float, beta: float) -> float:
    """``compact.CompactCodec.scale`` of FTRL: ``rules.base.rate``, op for op."""
    return alpha / (beta + math.sqrt(n))


@_helper
def _quantize(scaled: bool, state: Array, i: int, feature: np.uint64, step: int, p: Array) -> None:
    """``compact.CompactCodec.quantize`` of row ``i``, just updated as ``step``; ``scaled``:
    the weight-bearing value is ``eta`` times the first field (FTRL's ``z``)."""
    h = _mix(feature ^ _mix(np.uint64(step)))
    r_weight = float(h >> _S11) * 2.0**-53
    r_n = float(_mix(h) >> _S22) * 2.0**-42
    n = _round_n(state[i, 1], r_n)
    scale = _rate(n, p[0], p[1]) if scaled else 1.0
    state[i, 0] = _round_weight(state[i, 0] * scale, r_weight) / scale
    state[i, 1] = n


@_helper
def _admit(
    mode: int,
    feature: np.uint64,
    step: int,
    p_admit: float,
    n_admit: int,
    counters: NDArray[np.uint8],
    positions: NDArray[np.int64],
    row: int,
) -> bool:
    """Whether an occurrence at ``step`` admits a feature not admitted yet
    (:mod:`online_ctr.learning.admission`): Poisson, a hash of its id and the step below
    ``p_admit``; Bloom, its counters each counted (saturating at 255) and the least of them
    reaching ``n_admit``."""
    if mode == 1:
        salted = np.uint64(step) ^ np.uint64(_POISSON_SALT)
        h = _mix(feature ^ _mix(salted))
        return float(h >> _S11) * 2.0**-53 < p_admit
    least = 255
    for c in range(positions.shape[1]):
        q = positions[row, c]
        count = int(counters[q])
        if count < 255:
            count += 1
            counters[q] = count
        least = min(least, count)
    return least >= n_admit


@_helper
def _forget(
    counters: NDArray[np.uint8], recent: NDArray[np.int64], done: int, halve_every: int
) -> None:
    """Halve every counter, rounded down, once ``done`` examples are a multiple of
    ``halve_every`` (0: never): the Bloom counts' forgetting
    (:mod:`online_ctr.learning.admission`); the period it starts has admitted none yet."""
    if halve_every == 0 or done == 0 or done % halve_every != 0:
        return
    for q in range(counters.shape[0]):
        counters[q] >>= 1
    recent[_period(done, halve_every, recent.shape[0])] = 0


@_helper
def _period(done: int, halve_every: int, slots: int) -> int:
    """The slot of :attr:`~online_ctr.learning.admission.Admitting.recent` that counts the
    admissions of the example after ``done``."""
    return 0 if halve_every == 0 else (done // halve_every) % slots


@_helper
def _restart(state: Array, row: int, last: int, admitted: NDArray[np.uint8], mode: int) -> None:
    """Start row ``row`` again as a feature never seen (and, under an admission rule, not
    admitted): its feature expired, or was evicted."""
    for c in range(last + 1):
        state[row, c] = 0.0
    if mode != 0:
        admitted[row] = 0


@_helper
def _expire(
    state: Array,
    last: int,
    first: int,
    end: int,
    inverse: NDArray[np.intp],
    step: float,
    expire_after: int,
    admitted: NDArray[np.uint8],
    mode: int,
) -> int:
    """Start again from zero (and, under an admission rule, not admitted) each feature of
    occurrences ``first:end`` that example ``step + 1`` finds expired
    (:mod:`online_ctr.learning.retention`): stored (its step in column ``last`` above 0) and
    untouched for more than ``expire_after`` examples (0: never, and ``state`` may have no
    step column). Returns how many it started again."""
    if expire_after == 0:
        return 0
    found = 0
    for k in range(first, end):
        row = inverse[k]
        tau = state[row, last]
        if tau > 0.0 and step - tau >= expire_after:
            _restart(state, row, last, admitted, mode)
            found += 1
    return found


@_helper
def _advance(counts: NDArray[np.int64], marks: NDArray[np.int64], step: int, width: int) -> None:
    """Bring the budget's bins up to the one of ``step``: a bin that falls out of the window
    is merged into the next (:mod:`online_ctr.learning.eviction`)."""
    window = counts.shape[1]
    current = (step - 1) // width
    while current - marks[_LOWEST] >= window:
        old = marks[_LOWEST] % window
        new = (old + 1) % window
        for c in range(counts.shape[0]):
            counts[c, new] += counts[c, old]
            counts[c, old] = 0
        marks[_LOWEST] += 1


@_helper
def _evict(budget: Evicting, step: int) -> None:
    """While the budget's features held are more than its most, evict the oldest bin of zero
    weights, then of weights, never the bin of ``step``: each moves its class's cutoff past
    the bin."""
    most, width, counts, marks = budget
    if most == 0 or marks[_TRACKED] <= most:
        return
    window = counts.shape[1]
    current = (step - 1) // width
    for c in range(2):
        cut = _CUT_ZERO if c == 0 else _CUT_ALL
        b = max(marks[_LOWEST], marks[cut] // width)
        while marks[_TRACKED] > most and b < current:
            n = counts[c, b % window]
            counts[c, b % window] = 0
            if c == 1:  # the weights that never reach zero untouched go with their bin
                counts[_STABLE, b % window] = 0
            marks[_TRACKED] -= n
            marks[_EVICTED] += n
            marks[cut] = (b + 1) * width  # past an empty bin too: nothing of it is held
            b += 1
    # Every zero weight below the cutoff of all was evicted already.
    marks[_CUT_ZERO] = max(marks[_CUT_ZERO], marks[_CUT_ALL])


@_inlined
def _with_prior(s: float, base: Array) -> float:
    """``s`` with the base-rate prior's log-odds added, if it is on
    (:meth:`online_ctr.learning.base_rate.BaseRate.kernel`): after the weights' sum, as the
    service adds it to ``learner.logits``."""
    if base[0] == 0.0:
        return s
    return s + math.log((base[2] + 0.5) / (base[3] - base[2] + 0.5))


@_inlined
def _count(base: Array, y: float, v: float) -> None:
    """Count an example of label ``y`` and importance ``v`` in the base rate: ``c <- d c +
    v y``, ``m <- d m + v``."""
    base[2] = base[2] * base[1] + y * v
    base[3] = base[3] * base[1] + v


@_inlined
def _stamp(stepped: bool, state: Array, row: int, last: int, step: float) -> None:
    """Record in row ``row``'s step column that the ``step``-th example touched it, if the
    state has that column (``stepped``: with an ``expire_after`` or a feature budget)."""
    if stepped:
        state[row, last] = step


def _budget_loops(weight_of: RowWeightFn) -> tuple[Callable[..., None], Callable[..., None]]:
    """The budget's two steps of :func:`_rule_loop` that read the rule's weights
    (``weight_of``, the rule's compiled row math, which they close over)."""

    @_inlined
    def recount(state: Array, row: int, last: int, p: Array, budget: Evicting, change: int) -> None:
        """Add ``change`` to the features held and to the count of row ``row``'s bin (its
        last step's; one older than the window counts in the oldest kept) in its class, its
        weight at that step zero or not; nothing for a row not stored, or without a budget."""
        _, width, counts, marks = budget
        tau = state[row, last]
        if budget.max_features == 0 or tau <= 0.0:
            return
        weighted = weight_of(state, row, tau, p) != 0.0
        b = max((int(tau) - 1) // width, marks[_LOWEST])
        counts[int(weighted), b % counts.shape[1]] += change
        marks[_TRACKED] += change

    @_inlined
    def restart_evicted(
        state: Array, last: int, first: int, end: int, inverse: NDArray[np.intp], step: int,
        p: Array, budget: Evicting, admitted: NDArray[np.uint8], mode: int,
    ) -> None:  # fmt: skip
        """Bring the budget's bins up to ``step``'s, then start again from zero (and, under an
        admission rule, not admitted) each feature of occurrences ``first:end`` that the
        budget evicted: stored, and its last step at most the cutoff of all, or at most the
        cutoff of zero weights with its weight zero there. Nothing without a budget."""
        _, width, counts, marks = budget
        if budget.max_features == 0:
            return
        _advance(counts, marks, step, width)
        for k in range(first, end):
            row = inverse[k]
            tau = state[row, last]
            if tau <= 0.0 or tau > marks[_CUT_ZERO]:
                continue
            if tau <= marks[_CUT_ALL] or weight_of(state, row, tau, p) == 0.0:
                _restart(state, row, last, admitted, mode)

    return recount, restart_evicted


def _rule_loop(  # noqa: C901 (learn's, below)
    weight_of: RowWeightFn, update_row: RowUpdateFn, scaled: bool
) -> Callable[..., tuple[Array, Array]]:
    """The per-example loop of one rule, for :func:`learner`: ``weight_of`` and ``update_row``
    are the rule's row math compiled, ``scaled`` whether its compact encoding keeps ``n``
    scaled (:data:`online_ctr.learning.compact.SCALED`). The functions below close over them,
    so numba sees direct calls and inlines them, as it does the constant ``scaled``."""

    recount, restart_evicted = _budget_loops(weight_of)

    @_inlined
    def learn(  # noqa: C901 (its steps are inline and guarded, see below)
        compact: bool,
        p: Array,
        state: Array,
        t: int,
        logit_clip: float,
        indptr: NDArray[np.int64],
        inverse: NDArray[np.intp],
        values: Array,
        labels: Array,
        weights: Array,
        ids: NDArray[np.uint64],
        admission: Admitting,
        retaining: Retaining,
        base: Array,
    ) -> tuple[Array, Array]:
        """The loop for one encoding (``compact``), a constant once inlined in
        :func:`learn_examples`, so that the float64 loop never tests it. ``admission`` and
        ``retaining`` are :func:`learner`'s; with mode 0 every feature is admitted and
        nothing else of it is read, with ``expire_after`` 0 nothing expires."""
        mode, p_admit, n_admit, admitted, counters, positions, dropped, recent, every = admission
        expire_after, expired, budget = retaining
        budgeted = budget.max_features != 0
        stepped = expire_after != 0 or budgeted
        last = state.shape[1] - 1  # the step column, where features expire
        examples = len(indptr) - 1
        logits, probabilities = np.empty(examples), np.empty(examples)
        for j in range(examples):
            step = float(t + j)
            # Each step below is called only where it has work, and inline in this loop: a
            # call that passes references to arrays takes and drops each, two atomic
            # operations, which per feature had cost more than the math (2,000,000 Criteo
            # rows, loadtests.costs.bench_kernel: 0.87 million examples per CPU second; 1.85
            # guarded here; 1.43 with the admission's steps moved into a function).
            if every != 0:
                _forget(counters, recent, t + j, every)
            if expire_after != 0:
                expired[0] += _expire(
                    state, last, indptr[j], indptr[j + 1], inverse, step, expire_after, admitted,
                    mode,
                )  # fmt: skip
            if budgeted:
                restart_evicted(
                    state, last, indptr[j], indptr[j + 1], inverse, t + j + 1, p, budget,
                    admitted, mode,
                )  # fmt: skip
            s = 0.0  # summed in the stored order, as np.bincount sums in learner.logits
            for k in range(indptr[j], indptr[j + 1]):
                if mode != 0 and admitted[inverse[k]] == 0:
                    continue  # a feature not admitted contributes 0
                s += weight_of(state, inverse[k], step, p) * values[k]
            s = _with_prior(s, base)
            clipped = min(max(s, -logit_clip), logit_clip)
            probability = 1.0 / (1.0 + math.exp(-clipped))
            logits[j], probabilities[j] = s, probability
            # An importance weight scales the gradient (McMahan et al. 2013, section 4.4); a
            # weight of 1 changes no bit.
            residual = (probability - labels[j]) * weights[j]
            _count(base, labels[j], weights[j])
            for k in range(indptr[j], indptr[j + 1]):
                row = inverse[k]
                if mode != 0 and admitted[row] == 0:
                    if not _admit(
                        mode, ids[row], t + j + 1, p_admit, n_admit, counters, positions, row
                    ):
                        dropped[0] += 1  # its gradient is dropped (McMahan et al. 2013, 4.1)
                        continue
                    admitted[row] = 1
                    if mode == 2:
                        recent[_period(t + j, every, recent.shape[0])] += 1
                g = residual * values[k]
                if budgeted:  # it leaves the bin it was counted in
                    recount(state, row, last, p, budget, -1)
                update_row(state, row, g, g * g, step + 1.0, p)
                if compact:
                    _quantize(scaled, state, row, ids[row], t + j + 1, p)
                _stamp(stepped, state, row, last, step + 1.0)
                if budgeted:  # and is counted in the current one
                    recount(state, row, last, p, budget, 1)
            if budgeted:
                _evict(budget, t + j + 1)
        return logits, probabilities

    return learn


def _rule_examples(
    learn: Callable[..., tuple[Array, Array]], compact_rule: bool
) -> Callable[..., tuple[Array, Array]]:
    """:func:`learner`'s function for a rule whose loop is ``learn`` (:func:`_rule_loop`):
    the loop inlined twice, with ``compact`` a constant in each, the compact one only for a
    rule of :data:`online_ctr.learning.compact.RULES` (``compact_rule``)."""

    @_inlined
    def learn_examples(
        p: Array,
        state: Array,
        t: int,
        logit_clip: float,
        indptr: NDArray[np.int64],
        inverse: NDArray[np.intp],
        values: Array,
        labels: Array,
        weights: Array,
        ids: NDArray[np.uint64],
        compact: bool,
        admission: Admitting,
        retaining: Retaining,
        base: Array,
    ) -> tuple[Array, Array]:
        if compact_rule and compact:
            return learn(
                True, p, state, t, logit_clip, indptr, inverse, values, labels, weights, ids,
                admission, retaining, base,
            )  # fmt: skip
        return learn(
            False, p, state, t, logit_clip, indptr, inverse, values, labels, weights, ids,
            admission, retaining, base,
        )  # fmt: skip

    return learn_examples


def per_rule(*args: Any) -> Any:
    """What a cached template calls: in each copy :func:`_cached` makes of it, the rule's own
    compiled function bears this name. Never called itself."""
    raise NotImplementedError("only the per-rule copies made by _cached call it")


def _learn_examples_template(fingerprint: str) -> Callable[..., Any]:
    """The function :func:`learner` caches per rule (:func:`_cached`)."""

    def learn_examples(
        p: Array,
        state: Array,
        t: int,
        logit_clip: float,
        indptr: NDArray[np.int64],
        inverse: NDArray[np.intp],
        values: Array,
        labels: Array,
        weights: Array,
        ids: NDArray[np.uint64],
        compact: bool,
        admission: Admitting,
        retaining: Retaining,
        base: Array,
    ) -> Any:
        fingerprint  # noqa: B018  (read, so that it is a closure cell)
        return per_rule(
            p, state, t, logit_clip, indptr, inverse, values, labels, weights, ids, compact,
            admission, retaining, base,
        )  # fmt: skip

    return learn_examples


#: Per rule name, its compiled learner (built on first use).
_LEARNERS: dict[str, Callable[..., tuple[Array, Array]]] = {}
#: Each scalar function of the rules, compiled (see :func:`_jitted`).
_JITTED: dict[Callable[..., Any], Any] = {}


def learner(rule: Rule) -> Callable[..., tuple[Array, Array]]:
    """``rule``'s compiled loop: predict then learn each example in turn, updating ``state`` in
    place; returns the logits (unclipped) and probabilities. Mirrors ``learner.score`` and
    ``rule.update`` at B = 1: ``rule.weight_of`` scores, ``rule.update_row`` learns. With
    ``compact`` (for a rule of ``compact.RULES``), each updated row is then rounded as
    ``compact.CompactCodec.quantize`` (``ids`` are the rows' feature ids, which seed its
    randomness). Arguments: ``p`` (``rule.kernel_params``), ``state``, ``t``, ``logit_clip``,
    ``indptr``, ``inverse``, ``values``, ``labels``, ``weights`` (each example's importance
    weight, which scales its gradient), ``ids``, ``compact``, and ``admission``: a tuple
    (mode, p, n, admitted, counters, positions, dropped, recent, halve_every) of
    :mod:`online_ctr.learning.admission`'s mode code (0: every feature is admitted), its
    probability and count, per row whether it is admitted (uint8, updated in place), the
    counting Bloom filter (uint8, updated in place) and each row's counters in it, a
    one-item count of the occurrences whose gradient was dropped (added to), the filter's
    admissions per halving period (added to; a period's slot zeroed as it starts), and the
    period after which every counter is halved (0: never); and
    ``retaining`` (:class:`online_ctr.learning.retention.Retaining`): with an ``expire_after``
    above 0 or a feature budget (:mod:`online_ctr.learning.eviction`), ``state`` has one more
    column, each feature's last step, and a feature that an example finds expired or evicted
    is started again before it is scored; the budget's counts and marks are updated in place,
    and after each example it evicts what is past its most; and ``base``
    (:meth:`online_ctr.learning.base_rate.BaseRate.kernel`): ``(on, d, c, m)``, with ``on``
    the log-odds of ``(c + 1/2) / (m + 1)`` added to each logit after the weights' sum, and
    ``(c, m)`` updated in place as each example is learned.

    Built from the rule alone, with no table of rules here: its two functions are compiled,
    with every :func:`~online_ctr.learning.rules.base.scalar` function they call, and
    :func:`_rule_loop` closes over them, so the compiler sees direct calls and inlines them.
    """
    if rule.name not in _LEARNERS:
        name = f"{__name__}.learn_examples_{rule.name}"  # precompiled forms are found by it
        _LEARNERS[rule.name] = jit.Kernel(name, lambda: _compiled_learner(rule))
    return _LEARNERS[rule.name]


def _compiled_learner(rule: Rule) -> Any:
    """:func:`learner`'s numba dispatcher (made once numba is loaded)."""
    files: set[str] = set()
    weight_of, update_row = _jitted(rule.weight_of, files), _jitted(rule.update_row, files)
    learn = _rule_loop(weight_of, update_row, rule.name in SCALED)
    return _cached(
        _learn_examples_template,
        f"learn_examples_{rule.name}",  # the cache's file name: one per rule
        _fingerprint(files),
        _rule_examples(learn, rule.name in RULES),
    )


def _row_loops(
    weight_of: RowWeightFn, update_row: RowUpdateFn
) -> tuple[Callable[..., Array], Callable[..., Array]]:
    """The two loops :func:`row_math` compiles per rule, closing over its row math."""

    @_inlined
    def weights_rows(state: Array, ts: Array, p: Array) -> Array:
        """Each row's ``weight_of`` at ``ts[i]``, or at ``ts[0]`` if ``ts`` has one step."""
        w = np.empty(state.shape[0])
        each = len(ts) != 1
        for i in range(state.shape[0]):
            w[i] = weight_of(state, i, ts[i] if each else ts[0], p)
        return w

    @_inlined
    def update_rows(state: Array, g: Array, g2: Array, t: float, p: Array) -> Array:
        """A copy of ``state`` with ``update_row`` applied to each row as step ``t``."""
        new = state.copy()
        for i in range(state.shape[0]):
            update_row(new, i, g[i], g2[i], t, p)
        return new

    return weights_rows, update_rows


def _row_templates(fingerprint: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The two functions :func:`row_math` caches per rule (:func:`_cached`)."""

    def weights_rows(state: Array, ts: Array, p: Array) -> Any:
        fingerprint  # noqa: B018
        return per_rule(state, ts, p)

    def update_rows(state: Array, g: Array, g2: Array, t: float, p: Array) -> Any:
        fingerprint  # noqa: B018
        return per_rule(state, g, g2, t, p)

    return weights_rows, update_rows


@dataclass(frozen=True)
class RowMath:
    """A rule's array math, compiled from its row math: ``weights(state, ts, p)`` with ``ts``
    one step or one per row, and ``update(state, g, g2, t, p)`` returning new state; all
    arguments float64, C-contiguous (``rules.base.Rule.weights`` and ``update`` see to it)."""

    weights: Callable[[Array, Array, Array], Array]
    update: Callable[[Array, Array, Array, float, Array], Array]


#: Per rule name, its compiled array math (built on first use).
_ROW_MATH: dict[str, RowMath] = {}


def row_math(rule: Rule) -> RowMath:
    """``rule.weight_of`` and ``rule.update_row`` looped over the rows, compiled: what
    ``rule.weights`` and ``rule.update`` compute. The same float operations in the same order
    as the rule's row math, one row after another (numba's fastmath stays off, so nothing is
    fused or reordered)."""
    if rule.name not in _ROW_MATH:
        _ROW_MATH[rule.name] = RowMath(
            weights=jit.Kernel(
                f"{__name__}.weights_rows_{rule.name}", lambda: _compiled_row_math(rule)[0]
            ),
            update=jit.Kernel(
                f"{__name__}.update_rows_{rule.name}", lambda: _compiled_row_math(rule)[1]
            ),
        )
    return _ROW_MATH[rule.name]


#: Per rule name, the numba dispatchers of its array math (weights, update).
_ROW_DISPATCHERS: dict[str, tuple[Any, Any]] = {}


def _compiled_row_math(rule: Rule) -> tuple[Any, Any]:
    """:func:`row_math`'s two numba dispatchers (made once numba is loaded)."""
    if rule.name not in _ROW_DISPATCHERS:
        files: set[str] = set()
        weights, update = _row_loops(
            _jitted(rule.weight_of, files), _jitted(rule.update_row, files)
        )
        fingerprint = _fingerprint(files)
        _ROW_DISPATCHERS[rule.name] = (
            _cached(
                lambda f: _row_templates(f)[0], f"weights_rows_{rule.name}", fingerprint, weights
            ),
            _cached(
                lambda f: _row_templates(f)[1], f"update_rows_{rule.name}", fingerprint, update
            ),
        )
    return _ROW_DISPATCHERS[rule.name]


def _cached(
    template: Callable[[str], Callable[..., Any]],
    qualname: str,
    fingerprint: str,
    function: Callable[..., Any],
) -> Any:
    """The function ``template`` makes, compiled and cached on disk as ``qualname``, calling
    the rule's ``function`` as :func:`per_rule`. numba keys its disk cache by a function's
    file, bytecode and closure cells, not by what it calls: so the hash of the rule's source
    files (``fingerprint``) is its one cell, which makes an edit of the rule compile anew. A
    cell holding the compiled ``function`` would pickle with an id drawn anew in each process,
    and the cache would never hit: so the copy sees it as a global instead."""
    made = template("")
    copy = types.FunctionType(
        made.__code__,
        {**made.__globals__, per_rule.__name__: function},
        made.__name__,
        None,
        (types.CellType(fingerprint),),
    )
    copy.__qualname__ = qualname
    return _compiled(copy)


def _fingerprint(files: set[str]) -> str:
    """The hash of the source files a compiled function was built from."""
    return hashlib.sha256(b"".join(_read(f) for f in sorted(files))).hexdigest()


def _calling_compiled(function: Function, callees: dict[str, Any]) -> Function:
    """A copy of a rule module's ``function`` in which the names of the scalar functions it
    calls (``callees``) are their compiled forms, so that numba compiles it."""
    copy = types.FunctionType(
        function.__code__,
        {**function.__globals__, **callees},
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__qualname__ = function.__qualname__
    return cast(Function, copy)


def _jitted(function: Callable[..., Any], files: set[str]) -> Any:
    """``function`` compiled, calling the compiled form of each scalar function it names;
    ``files`` gains the source files of all of them."""
    files.add(function.__code__.co_filename)
    callees = {
        name: _jitted(value, files)
        for name in function.__code__.co_names
        if callable(value := function.__globals__.get(name)) and getattr(value, SCALAR, False)
    }
    if function not in _JITTED:
        _JITTED[function] = _helper(_calling_compiled(function, callees))
    return _JITTED[function]


def _read(path: str) -> bytes:
    """The bytes of the file at ``path``."""
    with open(path, "rb") as source:
        return source.read()
