"""OWL-QN against hand-computed pieces, closed forms, scipy's L-BFGS and scikit-learn's L1 solver.

scikit-learn minimizes ``||w||_1 + C_sk sum_i loss_i``; dividing by ``C_sk`` gives ours with
``C = 1 / C_sk``. Both sides fit no intercept: our bias feature is an ordinary column in both, so
both penalize it alike. Both objectives are computed by one function (``objective``), whose loss
is itself checked against scikit-learn's ``log_loss`` and against finite differences.

The set of nonzero weights is only comparable where the optimum is unique. On the Criteo head
it is not: of its 13,626 columns 9,537 duplicate another (a value seen in one example only is
the same column as every other such value of that example), and the L1 optimum may split a
duplicated weight in any proportion (at C = 3 OWL-QN splits two such pairs evenly, liblinear
unevenly). So the raw design is compared on the objective only, and a design with one column
per distinct column (4,089) on the objective, the support and the weights.

Measured (scikit-learn 1.9.1, liblinear; Criteo head, 2,000 rows): relative objective gaps of
1e-11 on the raw design at C = 3 and 10; on the distinct columns 1e-11 at C = 3 (105 nonzero
weights, same support, weights within 4e-5) and 5e-12 at C = 10 (27, same, 4e-5).
"""

from __future__ import annotations

import argparse
import json
from collections import deque
from pathlib import Path

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse
import sklearn
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

from online_ctr.cli.train_batch import register
from online_ctr.learning import owlqn
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.owlqn import (
    Design,
    Pairs,
    Point,
    design_from_batch,
    direction,
    evaluate,
    iterate,
    line_search,
    loss_and_gradient,
    minimize,
    orthant,
    project,
    pseudo_gradient,
    two_loop,
)
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules.base import Array

CRITEO_ROWS = 2000

#: The issue's bound on the relative objective gap to scikit-learn. Both solvers run far
#: tighter than this (gaps measured ~1e-11), so it only fails on a real disagreement.
OBJECTIVE_RTOL = 1e-6
#: OWL-QN's stopping tolerance in the comparisons: a relative decrease of f (averaged over
#: five steps) this small leaves a gap to the optimum far below OBJECTIVE_RTOL.
TIGHT = 1e-12


def objective(design: Design, w: Array, C: float) -> float:
    """``sum_i loss_i(w) + C ||w||_1``: the one function both solvers are judged by."""
    return loss_and_gradient(design, w)[0] + C * float(np.abs(w).sum())


def to_scipy(design: Design) -> scipy.sparse.csr_matrix:
    shape = (design.n_examples, design.n_features)
    return scipy.sparse.csr_matrix((design.values, design.columns, design.indptr), shape=shape)


def from_dense(x: Array, labels: Array) -> Design:
    """A design whose feature ids are the dense matrix's column numbers."""
    csr = scipy.sparse.csr_matrix(x)
    ids = csr.indices.astype(np.uint64)
    batch = Batch(csr.indptr.astype(np.int64), ids, csr.data.astype(np.float64), labels)
    return design_from_batch(batch)


def synthetic(n: int, d: int, seed: int) -> Design:
    """Sparse non-negative features, a bias column, labels drawn from a sparse true model."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, d)) < 0.2) * rng.choice([0.5, 1.0, 2.0], size=(n, d))
    x[:, 0] = 1.0
    true_w = np.where(rng.random(d) < 0.3, rng.normal(0.0, 1.5, d), 0.0)
    labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-(x @ true_w - 0.5)))).astype(np.float64)
    return from_dense(x, labels)


def sklearn_l1(design: Design, C: float) -> Array:
    """scikit-learn's L1 optimum of our objective (its C is the inverse of ours)."""
    # 1.8 deprecated penalty= in favour of l1_ratio=; older versions need penalty="l1".
    major, minor = (int(part) for part in sklearn.__version__.split(".")[:2])
    penalty = {"l1_ratio": 1.0} if (major, minor) >= (1, 8) else {"penalty": "l1"}
    model = LogisticRegression(
        **penalty,
        C=1.0 / C,
        fit_intercept=False,
        solver="liblinear",
        # liblinear's own stopping test: at 1e-8 it already lands within ~1e-11 of OWL-QN's f;
        # at 1e-10 it can cycle at float precision until max_iter (seen on synthetic data).
        tol=1e-8,
        max_iter=1000,  # a ConvergenceWarning would fail the test (filterwarnings = error)
        random_state=0,  # liblinear visits coordinates in random order
    )
    model.fit(to_scipy(design), design.labels)
    return np.asarray(model.coef_, dtype=np.float64).ravel()


def distinct_columns(design: Design) -> Design:
    """The design with each repeated column (same rows, same values) kept once."""
    x = to_scipy(design).tocsc()
    x.sort_indices()
    first: dict[tuple[bytes, bytes], int] = {}
    for j in range(x.shape[1]):
        rows = slice(x.indptr[j], x.indptr[j + 1])
        first.setdefault((x.indices[rows].tobytes(), x.data[rows].tobytes()), j)
    kept = np.array(sorted(first.values()))
    reduced = x[:, kept].tocsr()
    ids = design.ids[kept][reduced.indices]
    return design_from_batch(
        Batch(reduced.indptr.astype(np.int64), ids, reduced.data, design.labels)
    )


@pytest.fixture(scope="module")
def criteo(data_dir: Path) -> Design:
    rows = list(read_examples(data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv",
                              "criteo", limit=CRITEO_ROWS))  # fmt: skip
    batch = FeatureHasher().batch([example for example, _ in rows], [y for _, y in rows])
    return design_from_batch(batch)


# --- the pieces, by hand ---------------------------------------------------------------------


def test_pseudo_gradient_by_hand() -> None:
    # C = 1. Away from zero: g + C sign(w). At zero: g + C if that is < 0 (moving right
    # descends), g - C if that is > 0 (moving left descends), else 0, including |g| = C.
    w = np.array([2.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    g = np.array([-4.0, 0.25, -1.5, 1.5, 0.5, 1.0, -1.0])
    expected = np.array([-3.0, -0.75, -0.5, 0.5, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(pseudo_gradient(w, g, 1.0), expected)
    # Without L1 it is the gradient itself.
    np.testing.assert_array_equal(pseudo_gradient(w, g, 0.0), g)


def test_projection_and_orthant_by_hand() -> None:
    x = np.array([1.0, -2.0, 3.0, -4.0, 0.0, 5.0])
    y = np.array([2.0, -1.0, -1.0, 1.0, 1.0, 0.0])
    np.testing.assert_array_equal(project(x, y), [1.0, -2.0, 0.0, 0.0, 0.0, 0.0])
    # xi: the sign of w where w != 0, else the sign of v = -pseudo-gradient.
    w = np.array([3.0, -1.0, 0.0, 0.0, 0.0])
    v = np.array([-5.0, 5.0, 2.0, -2.0, 0.0])
    np.testing.assert_array_equal(orthant(w, v), [1.0, -1.0, 1.0, -1.0, 0.0])


def test_line_search_never_crosses_zero_and_decreases_enough() -> None:
    design = synthetic(200, 8, seed=3)
    C = 2.0
    point = evaluate(design, np.where(np.arange(design.n_features) % 2 == 0, 0.3, 0.0), C)
    v = -pseudo_gradient(point.w, point.g, C)
    # A long step along -w: every nonzero coordinate would cross zero at alpha = 1.
    p = project(-10.0 * point.w + v, v)
    new = line_search(design, point, v, p, C, alpha=1.0)
    assert new is not None
    xi = orthant(point.w, v)
    assert np.all(new.w * xi >= 0.0), "a coordinate left the orthant"
    assert np.all(new.w[xi == 0.0] == 0.0)
    assert new.f <= point.f - 1e-4 * float(v @ (new.w - point.w))


def test_two_loop_satisfies_the_newest_secant_equation() -> None:
    # BFGS updates make H y = s exactly for the newest pair, whatever the older ones.
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 6))
    hessian = a @ a.T + 6.0 * np.eye(6)
    pairs = []
    for _ in range(4):
        s = rng.normal(size=6)
        y = hessian @ s
        pairs.append((s, y, 1.0 / float(y @ s)))
    s, y, _ = pairs[-1]
    np.testing.assert_allclose(two_loop(y, pairs), s, rtol=1e-12, atol=1e-12)
    # Without pairs H = I.
    np.testing.assert_array_equal(two_loop(y, []), y)


def test_two_loop_scales_by_the_newest_pair() -> None:
    # Along a direction orthogonal to every s and y, H v = H_0 v = (s.y / y.y) v:
    # here (1 * 2) / (2 * 2) = 1/2.
    s, y = np.array([1.0, 0.0, 0.0]), np.array([2.0, 0.0, 0.0])
    np.testing.assert_array_equal(two_loop(np.array([0.0, 0.0, 3.0]), [(s, y, 0.5)]), [0, 0, 1.5])


def test_direction_keeps_only_signs_that_agree_with_v() -> None:
    # One pair s = (-2, 1), y = (-1, -1), rho = 1 / y.s = 1, and v = (1, 1), by hand:
    # a = rho s.v = -1, q = v - a y = (0, 0), H_0 q = 0, q += (a - rho y.q) s = (2, -1).
    # So H v = (2, -1) and p = pi(H v; v) = (2, 0).
    pairs = [(np.array([-2.0, 1.0]), np.array([-1.0, -1.0]), 1.0)]
    v = np.array([1.0, 1.0])
    np.testing.assert_array_equal(two_loop(v, pairs), [2.0, -1.0])
    np.testing.assert_array_equal(direction(v, pairs, C=1.0), [2.0, 0.0])
    np.testing.assert_array_equal(direction(v, pairs, C=0.0), [2.0, -1.0])  # plain L-BFGS


def test_line_search_sets_a_crossing_coordinate_to_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    # One click in four bias-only examples, C = 1/2: the optimum is w = log(3/5) < 0. From
    # w = 0.3 a huge step p = -1e6 crosses zero; projected, the first trial point is w' = 0,
    # which lowers f by 0.5, more than gamma v (w' - w) ~ 5e-5, so it is taken at once. (With
    # alpha p in place of w' - w the test would demand a decrease of 180 and backtrack.)
    design = design_from_batch(FeatureHasher().batch([{}] * 4, labels=[1, 0, 0, 0]))
    point = evaluate(design, np.array([0.3]), 0.5)
    v = -pseudo_gradient(point.w, point.g, 0.5)
    assert v[0] < 0.0
    trials: list[Array] = []

    def counted(design: Design, w: Array, C: float) -> Point:
        trials.append(w)
        return evaluate(design, w, C)

    monkeypatch.setattr(owlqn, "evaluate", counted)
    new = line_search(design, point, v, np.array([-1e6]), 0.5, alpha=1.0)
    assert new is not None
    assert new.w.tolist() == [0.0]
    assert len(trials) == 1


def test_iterate_remembers_loss_gradients_not_pseudo_gradients() -> None:
    design = synthetic(200, 8, seed=6)
    C = 3.0
    start = evaluate(design, np.zeros(design.n_features), C)
    pairs: Pairs = deque(maxlen=10)
    new = iterate(design, start, pairs, C)
    assert new is not None
    assert np.count_nonzero(new.w) > 0  # so sign(w) changed and the L1 term would show in y
    s, y, rho = pairs[-1]
    np.testing.assert_array_equal(s, new.w - start.w)
    np.testing.assert_array_equal(y, new.g - start.g)
    assert rho == pytest.approx(1.0 / float(y @ s), rel=1e-12)  # summed in another order


def test_loss_matches_sklearn_and_finite_differences() -> None:
    design = synthetic(100, 6, seed=1)
    w = np.random.default_rng(2).normal(size=design.n_features)
    loss, g = loss_and_gradient(design, w)
    p = 1.0 / (1.0 + np.exp(-(to_scipy(design) @ w)))
    # rtol 1e-12: the same sum in a different order and form (log1p vs logaddexp).
    assert loss == pytest.approx(log_loss(design.labels, p, normalize=False), rel=1e-12)
    h = 1e-6
    numeric = [
        (loss_and_gradient(design, w + h * e)[0] - loss_and_gradient(design, w - h * e)[0])
        / (2 * h)
        for e in np.eye(design.n_features)
    ]
    # Central differences err by ~h^2 f''' + eps f / h ~ 1e-8 on a loss of ~1e2.
    np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("s", "label", "expected_loss", "expected_g"),
    [(800.0, 1.0, 0.0, 0.0), (800.0, 0.0, 800.0, 1.0),
     (-800.0, 1.0, 800.0, -1.0), (-800.0, 0.0, 0.0, 0.0),
     (40.0, 1.0, np.exp(-40.0), 0.0), (-40.0, 0.0, np.exp(-40.0), 0.0)],
)  # fmt: skip
def test_loss_is_exact_at_extreme_logits(
    s: float, label: float, expected_loss: float, expected_g: float
) -> None:
    # One example, one feature, logit s. exp(800) overflows if formed naively (a RuntimeWarning,
    # an error here); a confident right answer's loss log(1 + e^-40) ~ 4.2e-18 vanishes if
    # computed as softplus(s) - s. The loss is exact to rounding (rel 1e-15); the gradient
    # p - y is exact to within float64's spacing near 1 (abs 1e-15; e^-40 is below it).
    design = from_dense(np.ones((1, 1)), np.array([label]))
    loss, g = loss_and_gradient(design, np.array([s]))
    assert loss == pytest.approx(expected_loss, rel=1e-15, abs=1e-300)
    assert g[0] == pytest.approx(expected_g, abs=1e-15)


# --- closed forms and oracles ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("C", "expected"),
    [(0.0, np.log(3.0)), (0.5, np.log(5.0 / 3.0)), (1.0, 0.0), (2.5, 0.0)],
)
def test_bias_only_closed_form(C: float, expected: float) -> None:
    # Three clicks in four bias-only examples: 4 sigma(w) - 3 + C sign(w) = 0, or w = 0
    # when |l'(0)| = |2 - 3| <= C. 1e-9: both stopping tests end far closer on one variable.
    design = design_from_batch(FeatureHasher().batch([{}] * 4, labels=[1, 1, 1, 0]))
    result = minimize(design, C, tol=TIGHT)
    assert result.converged
    assert result.w[0] == pytest.approx(expected, abs=1e-9)
    assert result.nonzero_weights == int(expected != 0.0)


def test_without_l1_it_is_lbfgs() -> None:
    design = synthetic(400, 12, seed=4)  # n >> d and noisy labels: a finite unique optimum

    def smooth(w: Array) -> tuple[float, Array]:
        return loss_and_gradient(design, w)

    reference = scipy.optimize.minimize(
        smooth, np.zeros(design.n_features), jac=True, method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10_000},
    )  # fmt: skip
    assert reference.success
    result = minimize(design, 0.0, tol=TIGHT)
    assert result.converged
    # Both stop with |grad l| ~ 4e-7, i.e. f within ~1e-13 of its minimum and w within
    # ~1e-6 of the minimizer, so these bounds hold even for different paths. Measured: the
    # same 18 iterates as scipy's L-BFGS-B, weights equal to 2e-16.
    assert result.objective == pytest.approx(reference.fun, rel=1e-12)
    np.testing.assert_allclose(result.w, reference.x, rtol=0, atol=1e-6)


def assert_matches_sklearn(design: Design, C: float, unique: bool = True) -> None:
    """Same objective to OBJECTIVE_RTOL; if the optimum is unique, same support and weights."""
    ours = minimize(design, C, max_iter=5000, tol=TIGHT)
    theirs = sklearn_l1(design, C)
    assert ours.converged
    assert ours.objective == pytest.approx(objective(design, ours.w, C), rel=1e-12)
    f_theirs = objective(design, theirs, C)
    assert (ours.objective - f_theirs) / f_theirs == pytest.approx(0.0, abs=OBJECTIVE_RTOL)
    assert 0 < ours.nonzero_weights < design.n_features  # both kinds: the support says something
    if unique:
        assert set(np.flatnonzero(ours.w)) == set(np.flatnonzero(theirs))
        # Both stop ~1e-11 from the optimum in f; along the flattest directions (features
        # seen in a handful of examples, curvature ~0.1) that leaves weights up to ~1e-3
        # apart. Measured: 4e-5 on Criteo, 1e-6 on the synthetic data.
        np.testing.assert_allclose(ours.w, theirs, rtol=0, atol=1e-3)


@pytest.mark.oracle
@pytest.mark.parametrize("C", [4.0, 8.0])  # 23 and 15 of 40 weights nonzero
def test_matches_sklearn_on_synthetic_data(C: float) -> None:
    assert_matches_sklearn(synthetic(300, 40, seed=5), C)


@pytest.mark.oracle
@pytest.mark.parametrize("C", [3.0, 10.0])  # 105 and 27 of 4,089 weights nonzero
def test_matches_sklearn_on_criteo(criteo: Design, C: float) -> None:
    assert_matches_sklearn(distinct_columns(criteo), C)


@pytest.mark.oracle
@pytest.mark.parametrize("C", [3.0, 10.0])
def test_matches_sklearn_on_criteo_with_repeated_columns(criteo: Design, C: float) -> None:
    assert_matches_sklearn(criteo, C, unique=False)


def test_distinct_columns_keeps_one_of_each(criteo: Design) -> None:
    reduced = distinct_columns(criteo)
    assert (criteo.n_features, reduced.n_features) == (13_626, 4_089)
    # Merging a repeated column's weight into its kept copy changes no logit.
    w = np.random.default_rng(0).normal(size=reduced.n_features)
    full = np.zeros(criteo.n_features)
    full[np.searchsorted(criteo.ids, reduced.ids)] = w
    np.testing.assert_allclose(criteo.dot(full), reduced.dot(w), rtol=1e-12)


# --- the command -----------------------------------------------------------------------------


def run(*argv: str | Path | int) -> int:
    parser = argparse.ArgumentParser(prog="online-ctr")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["train-batch", *map(str, argv)])
    status: int = args.func(args)
    return status


def test_command_reports_the_optimum(
    data_dir: Path, criteo: Design, capsys: pytest.CaptureFixture[str]
) -> None:
    path = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    assert run(path, "--format", "criteo", "--l1", 10, "--limit", CRITEO_ROWS) == 0
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    expected = minimize(criteo, 10.0)  # the command's defaults: max_iter 1000, tol 1e-6
    assert out["objective"] == expected.objective
    assert out["nonzero_weights"] == expected.nonzero_weights
    assert out["iterations"] == expected.iterations
    assert out["converged"] is expected.converged is True
    assert out["training_logloss"] == pytest.approx(expected.loss / CRITEO_ROWS, rel=1e-15)
    assert (out["examples"], out["features"], out["l1"]) == (CRITEO_ROWS, criteo.n_features, 10.0)
    assert out["seconds"] > 0


def test_command_fails_cleanly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path / "missing.tsv", "--format", "criteo", "--l1", 1) == 1
    (tmp_path / "empty.tsv").write_text("")
    assert run(tmp_path / "empty.tsv", "--format", "criteo", "--l1", 1) == 1
    assert "no examples" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run(tmp_path / "empty.tsv", "--format", "criteo", "--l1", -1)
