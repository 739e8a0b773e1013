"""A feature budget (:mod:`online_ctr.learning.eviction`) in the compiled learner, against a
literal transcription of its policy: the numpy rule one example at a time, the features held in
a Python dict of their last steps, and after each example, while more than the budget are held,
the features of the oldest bin of zero weights (then, once none is left, of weights) deleted
and their state zeroed. Bit for bit, for every rule; the same at every batch size; with
admission too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from online_ctr.learning.admission import Admission
from online_ctr.learning.eviction import (
    BIN_EXAMPLES,
    CUT_ALL,
    CUT_ZERO,
    MOST,
    WINDOW_BINS,
    check_max_features,
)
from online_ctr.learning.learner import LOGIT_CLIP
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import RULES
from online_ctr.learning.rules.base import Array
from testkit.paths import CRITEO
from tests.core.test_admission import BIAS_ID, ROWS, criteo
from tests.core.test_replay_command import last_json
from tests.core.test_replay_command import run as run_replay
from tests.core.test_sequential import PARAMS

#: Small bins and a short window, so that bins are merged out of it within the 1,500 rows.
BINS = (4, 16)
#: Budgets that evict zero weights only (2,000), and weights too (300).
BUDGETS = (2000, 300)


def literal(
    name: str, most: int, bins: tuple[int, int] = BINS
) -> tuple[Array, dict[int, Array], int]:
    """Probabilities, the state of the features held at the end (by id) and how many were
    evicted, one example at a time in plain Python over the numpy rule."""
    rule, (batch, features) = RULES[name], criteo()
    params = rule.params(**PARAMS[name])
    width, window = bins
    state, probabilities = rule.zeros(len(features.ids)), np.empty(len(batch))
    last: dict[int, int] = {}  # row -> the step of the example that last touched it
    zero: dict[int, bool] = {}  # row -> whether its weight was zero at that step
    evicted = 0
    clicks = 0.0
    for t in range(len(batch)):
        lo, hi = batch.indptr[t], batch.indptr[t + 1]
        rows, values = np.searchsorted(features.ids, batch.ids[lo:hi]), batch.values[lo:hi]
        w = rule.weights(state[rows], t, params).tolist()
        s = 0.0
        for w_i, x_i in zip(w, values.tolist(), strict=True):
            s += w_i * x_i
        s += math.log((clicks + 0.5) / (t - clicks + 0.5))  # the base-rate prior (its default)
        p = 1.0 / (1.0 + math.exp(-min(max(s, -LOGIT_CLIP), LOGIT_CLIP)))
        probabilities[t] = p
        clicks += batch.labels[t]
        step = t + 1
        for row, x_i in zip(rows.tolist(), values.tolist(), strict=True):
            g = np.array([(p - batch.labels[t]) * x_i])
            state[[row]] = rule.update(state[[row]], g, g * g, step, params)
            last[row] = step
            zero[row] = bool(rule.weights(state[[row]], step, params)[0] == 0.0)
        current = (step - 1) // width
        lowest = max(0, current - window + 1)  # older bins count as this one

        def bin_of(row: int) -> int:
            return max((last[row] - 1) // width, lowest)  # noqa: B023

        while len(last) > most:
            older = [r for r in last if bin_of(r) < current]
            classes = ([r for r in older if zero[r]], [r for r in older if not zero[r]])
            candidates = classes[0] or classes[1]
            if not candidates:
                break  # only the current bin is left
            oldest = min(bin_of(r) for r in candidates)
            for row in [r for r in candidates if bin_of(r) == oldest]:
                del last[row]
                state[row], evicted = 0.0, evicted + 1
    held = {int(features.ids[r]): state[r] for r in sorted(last)}
    return probabilities, held, evicted


def compiled(
    name: str, most: int, sizes: int = ROWS, admission: str = "all", bins: tuple[int, int] = BINS
) -> tuple[Array, dict[int, Array], int, InMemoryModel]:
    """The same through the in-process model, in batches of ``sizes`` examples."""
    rule, (batch, _) = RULES[name], criteo()
    model = InMemoryModel(
        rule,
        rule.params(**PARAMS[name]),
        admission=Admission.parse(admission),
        max_features=most,
        budget_bins=bins,
    )
    probabilities = [
        model.learn(batch.examples(start, min(start + sizes, len(batch)))).probabilities
        for start in range(0, len(batch), sizes)
    ]
    width = len(rule.fields)
    held = {i: row[:width] for i, row in model.snapshot().items()}
    return np.concatenate(probabilities), held, model.features_evicted(), model


@pytest.mark.parametrize("most", BUDGETS)
@pytest.mark.parametrize("name", sorted(RULES))
def test_the_kernel_evicts_as_the_literal_policy_bit_for_bit(name: str, most: int) -> None:
    want_p, want_state, want_evicted = literal(name, most)
    got_p, got_state, got_evicted, model = compiled(name, most)
    np.testing.assert_array_equal(got_p, want_p)
    assert sorted(got_state) == sorted(want_state)
    for feature, row in want_state.items():
        np.testing.assert_array_equal(got_state[feature], row)
    assert got_evicted == want_evicted > 1000
    # The count the budget keeps is the features held, and it is within the budget plus the
    # features of one bin (4 examples of at most 40).
    assert model.budget.tracked() == model.features_tracked() == len(want_state)
    assert model.features_tracked() <= most + 4 * 40


@pytest.mark.parametrize("name", ["ftrl", "rda"])
def test_zero_weights_go_first_and_weights_only_when_none_is_left(name: str) -> None:
    """At 2,000 the budget evicts over 14,000 features, every one with a zero weight at its
    last touch; at 100 it has had to evict weights too, and the model holds fewer. (FOBOS and
    the truncations shrink an untouched weight at its next read, and many reach zero so: they
    count among the weights at 2,000 already.)"""
    roomy, tight = (compiled(name, most)[3] for most in (2000, 100))
    assert roomy.budget.marks[CUT_ALL] == 0 < roomy.budget.marks[CUT_ZERO]
    assert roomy.features_evicted() > 14_000
    assert tight.budget.marks[CUT_ALL] > 0
    assert tight.nonzero_weights() < roomy.nonzero_weights()


@pytest.mark.parametrize("admission", ["all", "bloom:2", "poisson:0.3"])
@pytest.mark.parametrize("sizes", [1, 7, 512])
def test_the_batch_size_changes_nothing(admission: str, sizes: int) -> None:
    whole = compiled("ftrl", 300, admission=admission)
    parts = compiled("ftrl", 300, sizes, admission=admission)
    np.testing.assert_array_equal(parts[0], whole[0])
    assert sorted(parts[1]) == sorted(whole[1])
    for feature, row in whole[1].items():
        np.testing.assert_array_equal(parts[1][feature], row)
    assert parts[2] == whole[2] > 0
    assert parts[3].nonzero_weights() == whole[3].nonzero_weights()
    assert parts[3].dropped == whole[3].dropped
    np.testing.assert_array_equal(parts[3].budget.marks, whole[3].budget.marks)


def test_with_admission_an_evicted_feature_waits_to_be_admitted_again() -> None:
    """Under poisson:0.3 a feature evicted is drawn again when met, so it holds fewer and
    evicts fewer than the model that admits all; under bloom:2 its counts were kept."""
    plain = compiled("ftrl", 300)[3]
    poisson = compiled("ftrl", 300, admission="poisson:0.3")[3]
    assert poisson.features_evicted() < plain.features_evicted()
    assert poisson.dropped > 0 and BIAS_ID in compiled("ftrl", 300, admission="bloom:2")[1]


def test_a_budget_above_what_the_stream_brings_is_no_budget_bit_for_bit() -> None:
    rule, (batch, features) = RULES["rda"], criteo()
    never = InMemoryModel(rule, rule.params(**PARAMS["rda"]))
    roomy = InMemoryModel(rule, rule.params(**PARAMS["rda"]), max_features=len(features.ids))
    np.testing.assert_array_equal(
        roomy.learn(batch).probabilities, never.learn(batch).probabilities
    )
    width = len(rule.fields)
    assert {i: r[:width].tolist() for i, r in roomy.snapshot().items()} == {
        i: r[:width].tolist() for i, r in never.snapshot().items()
    }
    assert roomy.features_evicted() == 0
    assert roomy.nonzero_weights() == never.nonzero_weights()


def test_the_default_bins_merge_nothing_in_a_short_stream_and_still_evict() -> None:
    """The model's own bins (64 examples, a window of 16,384): the literal policy with them."""
    bins = (BIN_EXAMPLES, WINDOW_BINS)
    want_p, want_state, want_evicted = literal("ftrl", 2000, bins)
    got_p, got_state, got_evicted, model = compiled("ftrl", 2000, 100, bins=bins)
    np.testing.assert_array_equal(got_p, want_p)
    assert sorted(got_state) == sorted(want_state) and got_evicted == want_evicted > 0
    assert model.features_tracked() <= 2000 + BIN_EXAMPLES * 40


def test_purging_evicted_rows_changes_no_result() -> None:
    """The table is purged of evicted rows past twice the budget: the rows left are the
    features held, and what the model says is what it says unpurged (the literal policy)."""
    rule, (batch, _) = RULES["ftrl"], criteo()
    model = InMemoryModel(rule, rule.params(**PARAMS["ftrl"]), max_features=50, budget_bins=BINS)
    for start in range(0, len(batch), 100):
        model.learn(batch.examples(start, min(start + 100, len(batch))))
    assert len(model.table) < 2 * 50 + 4096  # it was purged: 11,000 features were met
    _, want_state, want_evicted = literal("ftrl", 50)
    assert sorted(model.snapshot()) == sorted(want_state)
    assert model.features_evicted() == want_evicted


@pytest.mark.parametrize("value", [-1, 1.5, True, "10", MOST + 1])
def test_a_bad_budget_is_refused_naming_it(value: object) -> None:
    with pytest.raises(ValueError, match="max_features must be a whole number of features"):
        check_max_features(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"minibatch": True}, "example by example"),
        ({"encoding": "compact"}, "max_features needs the encoding float64"),
        ({"expire_after": 100}, "expire_after or max_features, not both"),
    ],
)
def test_a_budget_refuses_what_it_cannot_do(options: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        InMemoryModel(RULES["ftrl"], max_features=10, **options)  # type: ignore[arg-type]


def test_replay_evicts_as_the_in_process_model(capsys: pytest.CaptureFixture[str]) -> None:
    """``online-ctr replay --max-features`` is the in-process model with it, and reports the
    features held at the end and how many were evicted."""
    # The test's hyper-parameters (PARAMS), which compiled() gives the in-process model.
    l2 = PARAMS["ftrl"]["l2"]
    flags = ("--limit", ROWS, "--max-features", 2000, "--numeric", "raw", "--l2", str(l2))
    assert run_replay(CRITEO, *flags) == 0
    out = last_json(capsys)
    _, held, evicted, model = compiled("ftrl", 2000, bins=(BIN_EXAMPLES, WINDOW_BINS))
    assert out["max_features"] == 2000
    assert out["features_tracked"] == len(held) and out["features_evicted"] == evicted > 0
    assert out["nonzero_weights"] == model.nonzero_weights()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--max-features", "-3"], "--max-features: max_features must be a whole number"),
        (["--max-features", "5", "--minibatch"], "drop --minibatch"),
        (["--max-features", "5", "--encoding", "compact"], "the float64 encoding"),
        (["--max-features", "5", "--expire-after", "9"], "--expire-after or --max-features"),
        (["--max-features", "5", "--sweep", "alpha=0.1,0.2"], "cannot be combined with --sweep"),
    ],
)
def test_replay_refuses_what_it_cannot_evict(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_replay(CRITEO, "--limit", 10, *flags) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
