"""The base-rate prior (online_ctr.learning.base_rate): its settings, its state as the compiled
learner keeps it, and what it adds to a logit, against the formulas written out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from online_ctr.learning.base_rate import MEAN, BaseRate, check_state, offset
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import unique_features
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import get_rule
from online_ctr.learning.sequential import learn_sequential


@pytest.mark.parametrize("text", ["off", "mean", "decay:1", "decay:100000", "decay:1099511627776"])
def test_a_setting_reads_back_as_written(text: str) -> None:
    assert BaseRate.parse(text).text == text


@pytest.mark.parametrize(
    "text", ["", "median", "decay", "decay:", "decay:0", "decay:-5", "decay:1.5", "decay:2e3",
             "decay:1099511627777", "Mean", "mean ", "decay:10:2"],
)  # fmt: skip
def test_a_bad_setting_is_refused_saying_what_is_valid(text: str) -> None:
    with pytest.raises(ValueError, match="'off', 'mean' or 'decay:H'"):
        BaseRate.parse(text)


def test_the_default_is_the_mean_and_off_adds_nothing() -> None:
    assert BaseRate("mean") == MEAN and MEAN.decay == 1.0
    assert BaseRate("off").logit(np.array([3.0, 10.0])) == 0.0
    assert BaseRate("mean").logit(np.array([3.0, 10.0])) == math.log(3.5 / 7.5)


def test_a_half_life_halves_the_counts() -> None:
    prior = BaseRate.parse("decay:10")
    state = prior.after(np.array([4.0, 8.0]), [0.0] * 10, [1.0] * 10)
    # After 10 examples the old counts weigh half; the new ones add sum_k d^k.
    added = sum(prior.decay**k for k in range(10))
    assert state[0] == pytest.approx(2.0, rel=1e-12)
    assert state[1] == pytest.approx(4.0 + added, rel=1e-12)


def test_importance_weights_count_as_that_many_examples() -> None:
    state = MEAN.after(MEAN.start(), [1.0, 0.0], [1.0, 10.0])
    assert state.tolist() == [1.0, 11.0]


@pytest.mark.parametrize(
    ("clicks", "examples"), [(-1.0, 2.0), (3.0, 2.0), (math.nan, 2.0), (1.0, math.inf)]
)
def test_counts_no_learner_leaves_are_refused(clicks: float, examples: float) -> None:
    with pytest.raises(ValueError, match="0 <= clicks <= examples"):
        check_state(clicks, examples)


@pytest.mark.parametrize("text", ["mean", "decay:7", "off"])
def test_the_compiled_learner_keeps_the_counts_as_after_does_bit_for_bit(text: str) -> None:
    """The kernel's counts after a batch are the pure function's, and each example's logit
    has the prior of the examples before it added (checked with the weights at zero)."""
    prior = BaseRate.parse(text)
    rng = np.random.default_rng(3)
    labels = (rng.random(300) < 0.1).astype(float).tolist()
    weights = rng.uniform(0.5, 3.0, 300).tolist()
    batch = FeatureHasher().batch([{}] * 300, labels).with_weights(weights)
    rule = get_rule("ftrl")
    params = rule.params(alpha=1e-300, beta=1.0, l1=0.0, l2=0.0)  # weights stay ~0
    base = prior.kernel(prior.start())
    features = unique_features(batch)
    learned = learn_sequential(
        rule, params, rule.zeros(len(features.ids)), 0, batch, features, base=base
    )
    np.testing.assert_array_equal(base[2:], prior.after(prior.start(), labels, weights))
    state, expected = prior.start(), []
    for y, v in zip(labels, weights, strict=True):
        expected.append(prior.logit(state))
        state = prior.after(state, [y], [v])
    np.testing.assert_allclose(learned.logits, expected, rtol=0, atol=1e-290)


def test_the_in_process_model_predicts_the_base_rate_before_any_weight() -> None:
    model = InMemoryModel(get_rule("ftrl"))
    model.learn(FeatureHasher().batch([{"a": "b"}] * 3, [1, 0, 0]))
    p = model.predict(FeatureHasher().batch([{"never": "seen"}]))
    bias = model.snapshot()[FeatureHasher().id("")]
    weight = get_rule("ftrl").weights(bias[None, :2], model.t, model.params)[0]
    assert p[0] == pytest.approx(1 / (1 + math.exp(-(offset(1.0, 3.0) + weight))), rel=1e-15)
