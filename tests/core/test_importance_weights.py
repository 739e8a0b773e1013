"""Importance weights in the learners (McMahan et al. 2013, section 4.4): an example of weight
``w`` gives its features ``g = w (p - y) x`` and ``g2 = g^2``. On the Criteo head, for every rule
and for the compact encoding of the rules that have one:

- weights of exactly 1 change no bit against no weights at all;
- the compiled sequential learner is a per-example transcription with the rule's own array math
  (``rule.weights``, ``rule.update``; ``CompactCodec.quantize`` for compact) bit for bit;
- the mini-batch learner at B = 1 is the sequential learner to rounding (numpy's ``exp``);
- FTRL with ``l1 = l2 = 0`` matches the closed form of a weighted first example;
- a weighted stream learned in batches of 1, 7 or all at once gives the same model, bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

from online_ctr.learning.compact import RULES as COMPACT_RULES
from online_ctr.learning.compact import CompactCodec
from online_ctr.learning.features import Batch, FeatureHasher, concat
from online_ctr.learning.learner import LOGIT_CLIP, Features, learn, unique_features
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.rules.base import Array
from online_ctr.learning.sampling import keep_negatives
from online_ctr.learning.sequential import Learned, learn_sequential
from tests.core.test_sequential import MINIBATCH_RTOL, PARAMS, STATE_ATOL
from tests.core.test_sequential import criteo as criteo_head

#: Every rule in float64, and the rules with a compact form in it too.
ENCODED = [(name, "float64") for name in sorted(RULES)] + [
    (name, "compact") for name in COMPACT_RULES
]
ROWS = 2000


@cache
def weighted(rows: int = ROWS) -> tuple[Batch, Features]:
    """The Criteo head's first ``rows`` examples, each with a weight of its own (log-normal,
    hardly ever a power of two, so the products round), then negatively sampled at 0.3 (the
    kept non-clicks' weights times 1/0.3), as the service would learn them: of 2,000 rows,
    892 examples of weights 0.06 to 90."""
    batch, _ = criteo_head(rows)
    own = np.random.default_rng(20130811).lognormal(0.0, 1.0, len(batch))
    sampled = keep_negatives(replace(batch, weights=own), 0.3)
    return sampled, unique_features(sampled)


def sequential(name: str, encoding: str, batch: Batch, features: Features) -> Learned:
    rule = get_rule(name)
    params = rule.params(**PARAMS[name])
    start = rule.zeros(len(features.ids))
    return learn_sequential(rule, params, start, 0, batch, features, encoding)


def transcription(
    name: str, encoding: str, batch: Batch, features: Features
) -> tuple[Array, Array]:
    """Probabilities and state: one example at a time, scored with ``rule.weights`` (``w . x``
    summed in stored order, the sigmoid from libm's ``exp``, as the kernel's), then each of its
    features given ``g = w (p - y) x``, ``g2 = g^2`` through ``rule.update`` as the next step;
    with ``compact`` each updated row is then rounded by ``CompactCodec.quantize``."""
    rule = get_rule(name)
    params = rule.params(**PARAMS[name])
    codec = CompactCodec.of(name, params) if encoding == "compact" else None
    state, probabilities = rule.zeros(len(features.ids)), np.empty(len(batch))
    weights = batch.example_weights()
    for t in range(len(batch)):
        one = batch.examples(t, t + 1)
        at = np.searchsorted(features.ids, one.ids)  # distinct within an example, stored order
        w, s = rule.weights(state[at], t, params), 0.0
        for w_i, x_i in zip(w.tolist(), one.values.tolist(), strict=True):
            s += w_i * x_i
        p = 1.0 / (1.0 + math.exp(-min(max(s, -LOGIT_CLIP), LOGIT_CLIP)))
        g = (weights[t] * (p - one.labels[0])) * one.values
        updated = rule.update(state[at], g, g * g, t + 1, params)
        state[at] = updated if codec is None else codec.quantize(one.ids, t + 1, updated)
        probabilities[t] = p
    return probabilities, state


@pytest.mark.parametrize(("name", "encoding"), ENCODED)
def test_weights_of_one_change_no_bit(name: str, encoding: str) -> None:
    batch, features = criteo_head(ROWS)
    assert batch.weights is None
    ones = replace(batch, weights=np.ones(len(batch)))
    plain, unit = (sequential(name, encoding, b, features) for b in (batch, ones))
    for field in ("logits", "probabilities", "losses", "state", "counts"):
        np.testing.assert_array_equal(getattr(unit, field), getattr(plain, field), err_msg=field)
    if encoding == "float64":  # the mini-batch learner too, over the whole batch at once
        rule = get_rule(name)
        params = rule.params(**PARAMS[name])
        start = rule.zeros(len(features.ids))
        got, expected = (learn(rule, params, start, 0, b, features) for b in (ones, batch))
        for field in ("probabilities", "g", "g2", "state"):
            np.testing.assert_array_equal(getattr(got, field), getattr(expected, field))


@pytest.mark.parametrize(("name", "encoding"), ENCODED)
def test_the_kernel_is_the_weighted_transcription_bit_for_bit(name: str, encoding: str) -> None:
    """No tolerance: the transcription does the kernel's float operations in its order
    (``(w (p - y)) x``, libm's ``exp``, the row math compiled into ``rule.update``), so any
    difference is a difference in the math, not rounding."""
    batch, features = weighted()
    expected_p, expected_state = transcription(name, encoding, batch, features)
    got = sequential(name, encoding, batch, features)
    np.testing.assert_array_equal(got.probabilities, expected_p)
    np.testing.assert_array_equal(got.state, expected_state)
    # The weights did something: unweighted, the same examples learn another model.
    unweighted = sequential(name, encoding, replace(batch, weights=None), features)
    assert not np.array_equal(unweighted.probabilities, got.probabilities)


@pytest.mark.parametrize("name", sorted(RULES))
def test_the_minibatch_learner_at_one_example_is_the_weighted_kernel(name: str) -> None:
    """Batches of one through ``learner.learn``: the same math, but its sigmoid takes ``exp``
    from numpy, which differs from libm's in the last bit for some arguments
    (``test_sequential``'s tolerances, unchanged). Measured on these 892 examples: at most
    1.9e-15 relative on probabilities; on the state (values up to 4,061: ``n`` sums ``(w g)^2``)
    within 1e-12 relative everywhere, and at most 2.0e-14 absolute on values below 1."""
    batch, features = weighted()
    rule = get_rule(name)
    params = rule.params(**PARAMS[name])
    state, probabilities = rule.zeros(len(features.ids)), np.empty(len(batch))
    for t in range(len(batch)):
        one = batch.examples(t, t + 1)
        own = unique_features(one)
        at = np.searchsorted(features.ids, own.ids)
        step = learn(rule, params, state[at], t, one, own)
        state[at] = step.state
        probabilities[t] = step.probabilities[0]
    got = sequential(name, "float64", batch, features)
    np.testing.assert_allclose(got.probabilities, probabilities, rtol=MINIBATCH_RTOL, atol=0)
    np.testing.assert_allclose(got.state, state, rtol=MINIBATCH_RTOL, atol=STATE_ATOL)


def test_ftrl_without_regularization_is_the_closed_form_of_a_weighted_example() -> None:
    """With ``l1 = l2 = 0`` and zero state, the first example (``p = 1/2``) of weight ``w`` and
    label ``y`` gives each of its features (``x = 1``) ``z = w (p - y)`` and ``n = (w (p -
    y))^2``, so the weight ``-z alpha / (beta + |z|)`` scores the next example."""
    rule = get_rule("ftrl")
    alpha, beta = 0.1, 1.0
    params = rule.params(alpha=alpha, beta=beta, l1=0.0, l2=0.0)
    w, y = 2.5, 0.0
    pair = FeatureHasher().batch([{"site": "news"}] * 2, labels=[y, 1.0])
    batch = replace(pair, weights=np.array([w, 1.0]))
    features = unique_features(batch)
    got = learn_sequential(rule, params, rule.zeros(2), 0, batch, features)
    g = w * (0.5 - y)  # 1.25 and 1.5625: exact in binary, as every value below
    one = batch.examples(0, 1)
    first = learn_sequential(rule, params, rule.zeros(2), 0, one, unique_features(one))
    assert first.state.tolist() == [[g, g * g]] * 2
    weight = -g * alpha / (beta + abs(g))  # both features: the bias and site=news
    # The rule divides by ``(beta + sqrt(n)) / alpha``: the same value, rounded otherwise.
    second = pytest.approx(1 / (1 + math.exp(-2 * weight)), rel=1e-14)
    assert got.probabilities.tolist() == [0.5, second]
    # A weight scales the gradient; it is not a repetition: a mini-batch of 2 copies of the
    # example sums the same z as the example weighted 2, but its n is 2 g^2, not (2 g)^2.
    copies = FeatureHasher().batch([{"site": "news"}] * 2, labels=[y, y])
    twice = replace(copies.examples(0, 1), weights=np.array([2.0]))
    start = rule.zeros(2)
    repeated = learn(rule, params, start, 0, copies, unique_features(copies)).state
    scaled = learn(rule, params, start, 0, twice, unique_features(twice)).state
    assert (repeated[:, 0] == scaled[:, 0]).all()
    assert (2 * repeated[:, 1] == scaled[:, 1]).all()


@pytest.mark.parametrize(("name", "encoding"), ENCODED)
def test_a_weighted_stream_learns_the_same_model_in_batches_of_any_size(
    name: str, encoding: str
) -> None:
    batch, _ = weighted(5000)
    rule = get_rule(name)
    outcomes = []
    for size in (1, 7, len(batch)):
        model = InMemoryModel(rule, rule.params(**PARAMS[name]), encoding=encoding)
        pieces = [
            batch.examples(start, min(start + size, len(batch)))
            for start in range(0, len(batch), size)
        ]
        whole = concat(pieces)
        assert whole.weights is not None
        assert whole.weights.tolist() == batch.example_weights().tolist()
        learned = [model.learn(piece) for piece in pieces]
        snapshot = model.snapshot()
        state = np.array([snapshot[i] for i in sorted(snapshot)])
        probabilities = np.concatenate([part.probabilities for part in learned])
        outcomes.append((size, model.t, probabilities, state))
    _, t, probabilities, state = outcomes[0]
    assert t == len(batch)
    for size, other_t, other_probabilities, other_state in outcomes[1:]:
        assert other_t == t, size
        np.testing.assert_array_equal(other_probabilities, probabilities, err_msg=str(size))
        np.testing.assert_array_equal(other_state, state, err_msg=str(size))
