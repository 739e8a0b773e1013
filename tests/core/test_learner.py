"""The mini-batch learner: its gradient, and how batches map onto the rules' sequential updates.

The models here are ``InMemoryModel(..., minibatch=True)``, which runs ``learner.learn``; the
default, exact sequential learner is tested in ``test_sequential.py``.

- The log-loss gradient matches finite differences of the log loss.
- With B = 1, ``learn`` and a mini-batch model are the rule applied one example at a time:
  bit for bit against a loop over ``rule.weights``/``rule.update``, and to rounding against
  textbook per-step definitions that regularize every feature seen on every step.
- With B > 1, every prediction uses the batch's starting weights and the rule sees, per
  feature, the sum of the batch's gradients and of their squares at ``t0 + B``; for rules
  whose untouched weights never move (FTRL, L1-SGD), a batch whose examples share no feature
  is exactly the same examples learned one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.features import Batch, Example, FeatureHasher
from online_ctr.learning.learner import (
    LOGIT_CLIP,
    Features,
    gradients,
    learn,
    logits,
    scores,
    scoring_features,
    sigmoid,
    unique_features,
)
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import RULES
from online_ctr.learning.rules.base import Array, Rule
from online_ctr.learning.stream_metrics import log_loss

NAMES = sorted(RULES)

#: Hyper-parameters with regularization strong enough to zero weights in these short streams.
PARAMS: dict[str, dict[str, float]] = {
    "ftrl": {"alpha": 0.3, "beta": 1.0, "l1": 0.5, "l2": 0.1},
    "rda": {"l1": 0.05, "gamma": 0.5},
    "fobos": {"alpha": 0.3, "beta": 1.0, "l1": 0.05},
    "tg": {"alpha": 0.3, "beta": 1.0, "l1": 0.05, "theta": 0.3, "k": 3},
    "truncation": {"alpha": 0.3, "beta": 1.0, "theta": 0.05, "k": 4},
    "l1sgd": {"alpha": 0.3, "beta": 1.0, "l1": 0.05},
}


def synthetic_stream(n: int, seed: int) -> tuple[list[Example], list[float]]:
    """Small examples: two categorical fields, a sometimes-present numeric one, noisy labels."""
    rng = np.random.default_rng(seed)
    examples: list[Example] = []
    labels = []
    for _ in range(n):
        site, ad = int(rng.integers(0, 6)), int(rng.integers(0, 4))
        example: dict[str, str | float] = {"site": f"s{site}", "ad": f"a{ad}"}
        if rng.random() < 0.5:
            example["price"] = float(rng.uniform(-2.0, 2.0))
        examples.append(example)
        labels.append(float(rng.random() < 1 / (1 + math.exp(-(site - 2.5) * 0.6 + ad * 0.3))))
    return examples, labels


def total_loss(batch: Batch, w: Array) -> float:
    features = unique_features(batch)
    return float(log_loss(sigmoid(logits(batch, features, w)), batch.labels).sum())


@pytest.mark.parametrize("seed", range(5))
def test_gradient_matches_finite_differences_of_the_log_loss(seed: int) -> None:
    examples, labels = synthetic_stream(12, seed)
    batch = FeatureHasher().batch(examples, labels)
    features = unique_features(batch)
    rng = np.random.default_rng(seed)
    w = rng.normal(scale=0.7, size=len(features.ids))
    g, g2 = gradients(batch, features, sigmoid(logits(batch, features, w)))
    h = 1e-6
    numeric = np.empty_like(w)
    for j in range(len(w)):
        step = np.zeros_like(w)
        step[j] = h
        numeric[j] = (total_loss(batch, w + step) - total_loss(batch, w - step)) / (2 * h)
    # Central differences err by h^2 f''' / 6 (~1e-12 here: f''' is O(B)) plus rounding of
    # the loss, eps |f| / h ~ 2.2e-16 * 10 / 1e-6 ~ 2e-9. atol 1e-7 is 50x the larger term and
    # far below any real slip (a missing x or a sign is O(0.1)).
    np.testing.assert_allclose(g, numeric, rtol=0, atol=1e-7)
    # g2 sums squares of per-occurrence gradients, not the square of the sum.
    p = sigmoid(logits(batch, features, w))
    per_pair = (p - batch.labels)[batch.rows()] * batch.values
    expected_g2 = np.zeros(len(w))
    np.add.at(expected_g2, features.inverse, per_pair**2)
    np.testing.assert_allclose(g2, expected_g2, rtol=1e-15)
    assert np.any(g2 < g**2 - 1e-12), "no feature with gradients of both signs: g2 untested"


@pytest.mark.parametrize("seed", range(4))
def test_logits_are_the_per_example_bincount_sums_bit_for_bit(seed: int) -> None:
    """The compiled sum adds each example's terms in order from 0.0, as np.bincount does:
    the same bits, signed zeros, infinities and NaN included (empty examples sum to 0.0)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 9, size=40)
    indptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    k = 25
    w = rng.normal(scale=10.0 ** rng.integers(-8, 9, size=k))
    w[:3] = [-0.0, np.inf, np.nan] if seed == 0 else [-0.0, 1e308, -1e308]
    inverse = rng.integers(0, k, size=int(indptr[-1])).astype(np.intp)
    x = rng.choice([1.0, -1.0, 0.5, -0.0, 3e-300], size=len(inverse))
    batch = Batch(indptr, np.zeros(len(inverse), np.uint64), x, np.zeros(len(sizes)))
    features = Features(ids=np.arange(k, dtype=np.uint64), inverse=inverse)
    rows = np.repeat(np.arange(len(sizes)), sizes)
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, 1e308 * 1e308
        expected = np.bincount(rows, weights=w[inverse] * x, minlength=len(sizes))
    got = logits(batch, features, w)
    assert got.dtype == np.float64 and got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("offset", [0.0, -0.0, -1.3862943611198906, 36.0, np.nan])
def test_scores_are_the_logits_plus_the_offset_and_their_sigmoid_bit_for_bit(offset: float) -> None:
    """As _score and the mini-batch learner computed them: ``s = logits(...)``, ``s +=
    offset`` if the offset is not 0, ``sigmoid(s)``: the clip, NaN, infinities, signed zeros
    and exactly +-LOGIT_CLIP included, for batches of every length numpy's exp might take
    apart (its vector loops and their tails)."""
    rng = np.random.default_rng(11)
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, LOGIT_CLIP, -LOGIT_CLIP, 40.0, -40.0]
    for examples in [*range(1, 20), 33, 64, 65, 257]:
        indptr = np.arange(examples + 1, dtype=np.int64)  # one feature each, x = 1: s = w
        w = rng.normal(scale=rng.choice([0.1, 3.0, 30.0]), size=examples)
        picked = rng.random(examples) < 0.3
        w[picked] = rng.choice(special, size=int(picked.sum()))
        batch = Batch(indptr, np.zeros(examples, np.uint64), np.ones(examples), np.zeros(examples))
        features = Features(ids=np.arange(examples, dtype=np.uint64), inverse=np.arange(examples))
        with np.errstate(invalid="ignore", over="ignore"):
            expected = logits(batch, features, w)
            if offset:
                expected += offset
            s, p = scores(batch, features, w, offset)
            assert s.tobytes() == expected.tobytes()
            assert p.tobytes() == sigmoid(expected).tobytes()


def test_extreme_logits_are_clipped_and_the_loss_stays_finite() -> None:
    s = np.array([-1e4, -LOGIT_CLIP, 0.0, LOGIT_CLIP, 1e4])
    p = sigmoid(s)
    assert p[0] == p[1] > 0.0 and p[-1] == p[-2] < 1.0
    assert np.isfinite(log_loss(p, np.array([1.0, 1.0, 0.0, 0.0, 0.0]))).all()


def sequential_by_rule(
    rule: Rule, params: Any, examples: list[Example], labels: list[float]
) -> tuple[list[float], dict[int, Array]]:
    """The rule applied one example at a time, in plain Python around its three functions,
    with the base-rate prior (the model's default): the running mean's log-odds added."""
    hasher = FeatureHasher()
    state: dict[int, Array] = {}
    predictions = []
    clicks = 0.0
    for t, (example, y) in enumerate(zip(examples, labels, strict=True)):
        one = hasher.batch([example])
        ids, xs = one.ids.tolist(), one.values.tolist()
        rows = np.array([state.get(i, rule.zeros(1)[0]) for i in ids])
        w = rule.weights(rows, t, params).tolist()
        s = 0.0
        for x_i, w_i in zip(xs, w, strict=True):
            s += w_i * x_i
        s += math.log((clicks + 0.5) / (t - clicks + 0.5))
        clicks += y
        p = float(sigmoid(np.array([s]))[0])
        g = np.array([(p - y) * x_i for x_i in xs])
        for i, row in zip(ids, rule.update(rows, g, g * g, t + 1, params), strict=True):
            state[i] = row
        predictions.append(p)
    return predictions, state


@pytest.mark.parametrize("name", NAMES)
def test_batches_of_one_are_the_rule_applied_example_by_example(name: str) -> None:
    rule = RULES[name]
    params = rule.params(**PARAMS[name])
    examples, labels = synthetic_stream(300, seed=11)
    expected, expected_state = sequential_by_rule(rule, params, examples, labels)

    model = InMemoryModel(rule, params, minibatch=True)
    hasher = FeatureHasher()
    predictions = []
    for example, y in zip(examples, labels, strict=True):
        step = model.learn(hasher.batch([example], [y]))
        predictions.extend(step.probabilities.tolist())
    assert predictions == expected
    assert model.t == len(examples)
    snapshot = model.snapshot()
    assert snapshot.keys() == expected_state.keys()
    for key, row in expected_state.items():
        np.testing.assert_array_equal(snapshot[key][:-1], row)
    occurrences = sum(snapshot[key][-1] for key in snapshot)
    assert occurrences == sum(len(hasher.batch([e]).ids) for e in examples)
    assert model.nonzero_weights() == int(
        np.count_nonzero(rule.weights(np.array(list(expected_state.values())), model.t, params))
    )


# Textbook per-step definitions (algorithms.md), regularizing every feature seen on every step.
# Each takes the dict of per-feature state, the example's {id: x} and y, and the step t of the
# example (1-based); it returns the prediction made before learning.
Textbook = Callable[[dict[int, list[float]], dict[int, float], float, int, dict[str, float]], float]


def _predict(w: dict[int, float], x: dict[int, float]) -> float:
    s = sum(w.get(i, 0.0) * x_i for i, x_i in x.items())
    return 1.0 / (1.0 + math.exp(-max(-LOGIT_CLIP, min(LOGIT_CLIP, s))))


def _soft(v: float, a: float) -> float:
    return math.copysign(max(0.0, abs(v) - a), v)


def _rate(n: float, p: dict[str, float]) -> float:
    return p["alpha"] / (p["beta"] + math.sqrt(n))


def _gradient_step(
    s: dict[int, list[float]], x: dict[int, float], y: float, p: dict[str, float]
) -> float:
    """Predict, then ``w <- w - eta g`` on the example's features; state rows are [w, n]."""
    prob = _predict({i: row[0] for i, row in s.items()}, x)
    for i, x_i in x.items():
        row = s.setdefault(i, [0.0, 0.0])
        g = (prob - y) * x_i
        row[1] += g * g
        row[0] -= _rate(row[1], p) * g
    return prob


def fobos_textbook(
    s: dict[int, list[float]], x: dict[int, float], y: float, t: int, p: Any
) -> float:
    prob = _gradient_step(s, x, y, p)
    for row in s.values():  # the backward step, on every coordinate
        row[0] = _soft(row[0], _rate(row[1], p) * p["l1"])
    return prob


def tg_textbook(s: dict[int, list[float]], x: dict[int, float], y: float, t: int, p: Any) -> float:
    prob = _gradient_step(s, x, y, p)
    if t % p["k"] == 0:
        for row in s.values():
            if abs(row[0]) <= p["theta"]:
                row[0] = _soft(row[0], p["k"] * _rate(row[1], p) * p["l1"])
    return prob


def truncation_textbook(
    s: dict[int, list[float]], x: dict[int, float], y: float, t: int, p: Any
) -> float:
    prob = _gradient_step(s, x, y, p)
    if t % p["k"] == 0:
        for row in s.values():
            if abs(row[0]) <= p["theta"]:
                row[0] = 0.0
    return prob


def l1sgd_textbook(
    s: dict[int, list[float]], x: dict[int, float], y: float, t: int, p: Any
) -> float:
    prob = _predict({i: row[0] for i, row in s.items()}, x)
    for i, x_i in x.items():
        row = s.setdefault(i, [0.0, 0.0])
        g = (prob - y) * x_i
        row[1] += g * g
        row[0] -= _rate(row[1], p) * (g + p["l1"] * float(np.sign(row[0])))
    return prob


def rda_textbook(s: dict[int, list[float]], x: dict[int, float], y: float, t: int, p: Any) -> float:
    """Xiao's w_t from the average of the t - 1 gradients before example t; rows are [z]."""
    w = {}
    if t > 1:
        for i, (z,) in s.items():
            gbar = z / (t - 1)
            if abs(gbar) > p["l1"]:
                w[i] = -(math.sqrt(t - 1) / p["gamma"]) * (gbar - p["l1"] * math.copysign(1, gbar))
    prob = _predict(w, x)
    for i, x_i in x.items():
        s.setdefault(i, [0.0])[0] += (prob - y) * x_i
    return prob


TEXTBOOK: dict[str, Textbook] = {
    "fobos": fobos_textbook,
    "tg": tg_textbook,
    "truncation": truncation_textbook,
    "l1sgd": l1sgd_textbook,
    "rda": rda_textbook,
}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(TEXTBOOK))
def test_model_with_batches_of_one_follows_the_textbook_definition(name: str, seed: int) -> None:
    """FTRL's literal Algorithm 1 is checked in ``test_ftrl_algorithm1.py``; the definitions
    here have no base-rate prior (the sequential one above has)."""
    rule = RULES[name]
    params = rule.params(**PARAMS[name])
    model = InMemoryModel(rule, params, minibatch=True, base_rate=BaseRate("off"))
    hasher = FeatureHasher()
    examples, labels = synthetic_stream(400, seed)
    state: dict[int, list[float]] = {}
    worst, zeroed = 0.0, False
    for t, (example, y) in enumerate(zip(examples, labels, strict=True), start=1):
        batch = hasher.batch([example], [y])
        x = dict(zip(batch.ids.tolist(), batch.values.tolist(), strict=True))
        expected = TEXTBOOK[name](state, x, y, t, PARAMS[name])
        got = float(model.learn(batch).probabilities[0])
        worst = max(worst, abs(got - expected))
        zeroed |= model.nonzero_weights() < model.features_tracked()
    # The model shrinks lazily (S_(m a) where the textbook applies S_a m times), sums w . x in
    # another order and takes exp from numpy rather than libm: differences of a few ulps per
    # step that stay ~1e-15 on weights of size ~1 (test_rules_lazy bounds the shrinkage part
    # at 1e-13 over 200 steps); through the sigmoid (slope <= 1/4) and ~4 features, 1e-12 on
    # probabilities leaves room. A wrong step count (t vs t - 1) moves predictions by ~1e-3.
    assert worst <= 1e-12
    assert zeroed or name == "l1sgd", "regularization never zeroed a weight: untested"


def batch_gradients(batch: Batch, p: Array) -> dict[int, tuple[float, float]]:
    """Per feature id, the sum over the batch of (p - y) x and of its square, by hand."""
    sums: dict[int, tuple[float, float]] = {}
    for j in range(len(batch)):
        for k in range(int(batch.indptr[j]), int(batch.indptr[j + 1])):
            g = (float(p[j]) - float(batch.labels[j])) * float(batch.values[k])
            total, squares = sums.get(int(batch.ids[k]), (0.0, 0.0))
            sums[int(batch.ids[k])] = (total + g, squares + g * g)
    return sums


@pytest.mark.parametrize("batch_size", [2, 7, 32])
@pytest.mark.parametrize("name", NAMES)
def test_a_batch_predicts_with_its_start_weights_and_sums_gradients_per_feature(
    name: str, batch_size: int
) -> None:
    rule = RULES[name]
    params = rule.params(**PARAMS[name])
    model = InMemoryModel(rule, params, minibatch=True)
    hasher = FeatureHasher()
    examples, labels = synthetic_stream(50 + batch_size, seed=batch_size)
    model.learn(hasher.batch(examples[:50], labels[:50]))  # some state to start from
    t0 = model.t
    batch = hasher.batch(examples[50:], labels[50:])
    features = scoring_features(batch)  # the model's grouping: its step's rows are in its order
    start = model.state_of(features.ids)[:, :-1]
    before = model.predict(batch)

    step = model.learn(batch)

    np.testing.assert_array_equal(step.probabilities, before)
    sums = batch_gradients(batch, step.probabilities)
    g = np.array([sums[i][0] for i in features.ids.tolist()])
    g2 = np.array([sums[i][1] for i in features.ids.tolist()])
    # The by-hand sums add in the same order as the learner (batch order), so: bit for bit.
    np.testing.assert_array_equal(step.state, rule.update(start, g, g2, t0 + batch_size, params))
    np.testing.assert_array_equal(model.state_of(features.ids)[:, :-1], step.state)
    assert model.t == t0 + batch_size
    counts = dict.fromkeys(features.ids.tolist(), 0)
    for i in batch.ids.tolist():
        counts[i] += 1
    assert step.counts.tolist() == list(counts.values())
    assert any(c > 1 for c in counts.values()), "no feature shared by two examples"


def disjoint_batch(examples: list[dict[int, float]], labels: list[float]) -> Batch:
    """A batch built by hand, with no bias feature: the examples share no feature id."""
    ids = [i for x in examples for i in x]
    assert len(ids) == len(set(ids))
    return Batch(
        indptr=np.cumsum([0] + [len(x) for x in examples]).astype(np.int64),
        ids=np.array(ids, dtype=np.uint64),
        values=np.array([v for x in examples for v in x.values()]),
        labels=np.array(labels),
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("name", ["ftrl", "l1sgd"])
def test_a_batch_of_examples_sharing_no_feature_equals_learning_them_one_by_one(
    name: str, seed: int
) -> None:
    """Exact for the rules whose weights ignore ``t`` and move only when touched.

    Each feature then sees one gradient, from a prediction that no other example of the batch
    could have changed. (For FOBOS, TG, truncation and RDA it is not: a batch is one touch at
    its last step, so the penalties of the rounds inside it are counted differently.)
    """
    rule = RULES[name]
    params = rule.params(**PARAMS[name])
    rng = np.random.default_rng(seed)
    width, size = 5, 6
    state = rule.zeros(width * size)
    for t in range(1, 30):  # a common history, on all features
        g = rng.normal(size=width * size)
        state = rule.update(state, g, g * g, t, params)
    ids = np.arange(width * size, dtype=np.uint64) + np.uint64(1000)
    examples = [
        {int(ids[width * j + c]): float(rng.choice([1.0, rng.normal()])) for c in range(width)}
        for j in range(size)
    ]
    labels = rng.integers(0, 2, size=size).astype(np.float64).tolist()

    batch = disjoint_batch(examples, labels)
    features = unique_features(batch)
    order = np.searchsorted(ids, features.ids)
    together = learn(rule, params, state[order], 29, batch, features)

    one_by_one = state.copy()
    predictions = []
    for j, (x, y) in enumerate(zip(examples, labels, strict=True)):
        single = disjoint_batch([x], [y])
        f = unique_features(single)
        rows = np.searchsorted(ids, f.ids)
        step = learn(rule, params, one_by_one[rows], 29 + j, single, f)
        one_by_one[rows] = step.state
        predictions.append(float(step.probabilities[0]))
    np.testing.assert_array_equal(together.probabilities, predictions)
    np.testing.assert_array_equal(together.state, one_by_one[order])
