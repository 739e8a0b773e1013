"""OWL-QN: L1-regularized logistic regression in batch, the reference the online rules answer to.

Andrew & Gao, "Scalable Training of L1-Regularized Log-Linear Models", ICML 2007. Minimizes
``f(w) = l(w) + C ||w||_1``, ``l(w) = sum_i log(1 + exp(-(2 y_i - 1) w . x_i))`` for labels
``y_i`` in {0, 1}: L-BFGS with four changes (Section 3.2, Algorithm 1):

1. the pseudo-gradient ``diamond f`` replaces the gradient, and ``v = -diamond f``;
2. the direction ``p = pi(H v; v)`` keeps only the coordinates that agree in sign with ``v``;
3. line-search points are projected on the orthant ``xi`` chosen at ``w``:
   ``w' = pi(w + alpha p; xi)``, so a coordinate that would cross zero becomes zero;
4. the pairs ``(s, y)`` use the gradient of the loss ``l`` alone, without the L1 term.

Four examples with only the bias feature, three of them clicks, ``C = 1/2``: the optimum
solves ``4 sigma(w) - 3 + C = 0``, so ``w = log(5/3)``.

>>> from online_ctr.learning.features import FeatureHasher
>>> design = design_from_batch(FeatureHasher().batch([{}] * 4, labels=[1, 1, 1, 0]))
>>> result = minimize(design, C=0.5, tol=1e-12)
>>> bool(abs(result.w[0] - np.log(5 / 3)) < 1e-8), result.converged
(True, True)
>>> minimize(design, C=1.0).nonzero_weights  # |l'(0)| = 1 <= C: zero is optimal
0
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import Batch
from online_ctr.learning.learner import unique_features
from online_ctr.learning.rules.base import Array

#: The line search's gamma and beta: the paper allows any values in (0, 1); these are the
#: authors' released code's (accept any noticeable decrease, else halve the step).
GAMMA, BETA = 1e-4, 0.5
#: After this many halvings alpha ~ 1e-18: w + alpha p rounds to w, so the search has stalled.
MAX_BACKTRACKS = 60
#: Steps the relative decrease of f is averaged over: one step's decrease is too noisy a test
#: (the authors' released code also waits for five steps).
WINDOW = 5

#: The L-BFGS memory: ``(s, y, 1 / y.s)``, oldest first.
Pairs = deque[tuple[Array, Array, float]]


@dataclass(frozen=True)
class Design:
    """Examples as CSR rows over columns ``0..n_features-1``; column ``j`` is feature ``ids[j]``."""

    indptr: NDArray[np.int64]
    columns: NDArray[np.intp]
    values: Array
    labels: Array
    ids: NDArray[np.uint64]
    rows: NDArray[np.intp] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not np.isin(self.labels, (0.0, 1.0)).all():
            raise ValueError("labels must be 0 or 1")
        rows = np.repeat(np.arange(self.n_examples), np.diff(self.indptr))
        object.__setattr__(self, "rows", rows)  # frozen: set once, reused by every product

    @property
    def n_examples(self) -> int:
        return len(self.indptr) - 1

    @property
    def n_features(self) -> int:
        return len(self.ids)

    def dot(self, w: Array) -> Array:
        """``X w``: the logit of every example."""
        contributions = w[self.columns] * self.values
        return np.bincount(self.rows, contributions, self.n_examples).astype(np.float64)

    def transpose_dot(self, r: Array) -> Array:
        """``X^T r``: per feature, the sum over examples of ``r_i x_ij``."""
        contributions = r[self.rows] * self.values
        return np.bincount(self.columns, contributions, self.n_features).astype(np.float64)


def design_from_batch(batch: Batch) -> Design:
    """Number a batch's distinct feature ids (sorted) as columns, keeping the ids."""
    features = unique_features(batch)
    return Design(batch.indptr, features.inverse, batch.values, batch.labels, features.ids)


@dataclass(frozen=True)
class OWLQNResult:
    """The minimizer found, ``f`` and ``l`` there, and how the run ended."""

    w: Array
    objective: float
    loss: float
    iterations: int
    converged: bool
    nonzero_weights: int


def loss_and_gradient(design: Design, w: Array) -> tuple[float, Array]:
    """``l(w)`` and ``grad l(w)``, accurate for any logit (no clipping, no ``log(1 - p)``)."""
    s = design.dot(w)
    # loss_i = log(1 + exp(-s)) for a click, log(1 + exp(s)) otherwise: one logaddexp, which
    # neither overflows nor cancels (softplus(s) - s would lose a confident click's loss).
    loss = float(np.sum(np.logaddexp(0.0, (1.0 - 2.0 * design.labels) * s)))
    p = np.exp(-np.logaddexp(0.0, -s))  # sigmoid(s) without overflow on either side
    return loss, design.transpose_dot(p - design.labels)


def pseudo_gradient(w: Array, g: Array, C: float) -> Array:
    """``diamond f``: the one-sided derivative that decreases ``f``, or 0 if neither does.

    >>> w, g = np.array([1.0, -1.0, 0.0, 0.0, 0.0]), np.array([0.5, 0.5, -2.0, 2.0, 0.3])
    >>> pseudo_gradient(w, g, C=1.0)
    array([ 1.5, -0.5, -1. ,  1. ,  0. ])
    """
    right = g + np.where(w == 0.0, C, C * np.sign(w))  # partial_i^+ f
    left = g + np.where(w == 0.0, -C, C * np.sign(w))  # partial_i^- f
    return np.where(left > 0.0, left, np.where(right < 0.0, right, 0.0))


def project(x: Array, y: Array) -> Array:
    """``pi(x; y)``: ``x_i`` where ``sign(x_i) = sign(y_i)``, else 0.

    >>> project(np.array([1.0, -2.0, 3.0, 0.0]), np.array([1.0, 1.0, -1.0, 5.0]))
    array([1., 0., 0., 0.])
    """
    return np.where(np.sign(x) == np.sign(y), x, 0.0)


def orthant(w: Array, v: Array) -> Array:
    """``xi``: the sign of ``w_i``, or where ``w_i = 0`` the sign of ``v_i = -diamond_i f``."""
    return np.where(w != 0.0, np.sign(w), np.sign(v))


def _dot(a: Array, b: Array) -> float:
    """``a . b`` without BLAS: for vectors this short OpenBLAS's threads cost more than they
    save, and on a busy machine their spinning made each product hundreds of times slower."""
    return float(np.einsum("i,i->", a, b))


def two_loop(v: Array, pairs: Sequence[tuple[Array, Array, float]]) -> Array:
    """``H v`` by the L-BFGS two-loop recursion over ``(s, y, 1 / y.s)``, oldest first."""
    q = v.copy()
    a = []
    for s, y, rho in reversed(pairs):
        a.append(rho * _dot(s, q))
        q -= a[-1] * y
    if pairs:  # H_0 = (s.y / y.y) I from the newest pair, the usual scaling
        s, y, rho = pairs[-1]
        q *= 1.0 / (rho * _dot(y, y))
    for (s, y, rho), a_i in zip(pairs, reversed(a), strict=True):
        q += (a_i - rho * _dot(y, q)) * s
    return q


@dataclass(frozen=True)
class Point:
    """An iterate with ``f``, ``l`` and ``grad l`` there."""

    w: Array
    f: float
    loss: float
    g: Array


def evaluate(design: Design, w: Array, C: float) -> Point:
    """The iterate ``w`` with ``f``, ``l`` and ``grad l`` computed."""
    loss, g = loss_and_gradient(design, w)
    return Point(w, loss + C * float(np.abs(w).sum()), loss, g)


def line_search(
    design: Design, point: Point, v: Array, p: Array, C: float, alpha: float
) -> Point | None:
    """Backtrack ``alpha beta^n`` until ``f(w') <= f(w) - gamma v.(w' - w)``; None if stalled.

    ``w' = pi(w + alpha p; xi)`` stays where ``f`` is smooth; ``w' - w`` may fall short of
    ``alpha p``, and the test uses the step actually taken.
    """
    xi = orthant(point.w, v)
    for _ in range(MAX_BACKTRACKS):
        w = point.w + alpha * p
        if C > 0:  # at C = 0 f is smooth everywhere: no orthant to keep (as in L-BFGS)
            w = project(w, xi)
        if np.array_equal(w, point.w):  # alpha p below rounding: no step left to try
            return None
        new = evaluate(design, w, C)
        if new.f <= point.f - GAMMA * _dot(v, w - point.w):
            return new
        alpha *= BETA
    return None


def _remember(pairs: Pairs, s: Array, y: Array) -> None:
    """Keep ``(s, y)`` unless ``y.s <= 0`` (convex ``l``: only a flat or rounded-off step)."""
    ys = _dot(y, s)
    if ys > 0.0:
        pairs.append((s, y, 1.0 / ys))


def _settled(history: list[float], tol: float) -> bool:
    """Whether the relative decrease of ``f``, averaged over ``WINDOW`` steps, is within ``tol``."""
    if len(history) <= WINDOW:
        return False
    decrease = (history[-1 - WINDOW] - history[-1]) / WINDOW
    return decrease <= tol * max(abs(history[-1]), np.finfo(float).tiny)


def direction(v: Array, pairs: Sequence[tuple[Array, Array, float]], C: float) -> Array:
    """``p = pi(H v; v)``: the quasi-Newton step where it agrees in sign with ``v``, else 0."""
    d = two_loop(v, pairs)
    # At C = 0, v is -grad f and OWL-QN is plain L-BFGS, as in the authors' code.
    return project(d, v) if C > 0 else d


def iterate(design: Design, point: Point, pairs: Pairs, C: float) -> Point | None:
    """One step of Algorithm 1 from ``point``, remembering its ``(s, y)``; None if stalled."""
    v = -pseudo_gradient(point.w, point.g, C)
    p = direction(v, pairs, C)
    # With no pairs H = I carries no scale: start at a unit-length step instead of |v|.
    alpha = 1.0 if pairs else min(1.0, 1.0 / np.sqrt(_dot(p, p)))
    new = line_search(design, point, v, p, C, alpha)
    if new is not None:
        _remember(pairs, new.w - point.w, new.g - point.g)  # grad l, never grad f
    return new


def minimize(
    design: Design,
    C: float,
    m: int = 10,
    max_iter: int = 1000,
    tol: float = 1e-6,
    gtol: float = 1e-10,
) -> OWLQNResult:
    """Minimize ``l(w) + C ||w||_1`` from ``w = 0`` (Algorithm 1).

    Stops when the relative decrease of ``f`` averaged over the last ``WINDOW`` steps is at
    most ``tol``, or ``||diamond f||`` falls to ``gtol`` times its value at ``w = 0`` (both
    count as converged), or after ``max_iter`` steps or a stalled line search (not converged).
    """
    if C < 0 or m < 1:
        raise ValueError(f"need C >= 0 and m >= 1, got C={C}, m={m}")
    point = evaluate(design, np.zeros(design.n_features), C)
    pairs: Pairs = deque(maxlen=m)
    history = [point.f]
    v = pseudo_gradient(point.w, point.g, C)
    v_0 = np.sqrt(_dot(v, v))
    converged = False
    while len(history) <= max_iter:
        v = pseudo_gradient(point.w, point.g, C)
        if np.sqrt(_dot(v, v)) <= gtol * v_0:
            converged = True
            break
        new = iterate(design, point, pairs, C)
        if new is None:
            break
        point = new
        history.append(point.f)
        if _settled(history, tol):
            converged = True
            break
    nonzero = int(np.count_nonzero(point.w))
    return OWLQNResult(point.w, point.f, point.loss, len(history) - 1, converged, nonzero)
