"""Feature expiry (:mod:`online_ctr.learning.retention`) in the compiled learner, against a
literal transcription: the numpy rule one example at a time, each feature's last step kept in
a Python dict, and a feature untouched for more than ``expire_after`` examples started again
from zero. Bit for bit, for every rule; the same at every batch size; with admission too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from online_ctr.learning.admission import Admission
from online_ctr.learning.learner import LOGIT_CLIP, sigmoid
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.retention import MOST, check_expire_after, live
from online_ctr.learning.rules import RULES
from online_ctr.learning.rules.base import Array
from testkit.paths import CRITEO
from tests.core.test_admission import BIAS_ID, ROWS, criteo
from tests.core.test_replay_command import last_json
from tests.core.test_replay_command import run as run_replay
from tests.core.test_sequential import PARAMS

#: Short enough that most of the 1,500 rows' features expire, some several times.
SPAN = 40


def literal(name: str, span: int) -> tuple[Array, dict[int, Array], int]:
    """Probabilities, the state of the features held at the end (by id) and how many times a
    feature expired, one example at a time in plain Python over the numpy rule."""
    rule, (batch, features) = RULES[name], criteo()
    params = rule.params(**PARAMS[name])
    state, probabilities = rule.zeros(len(features.ids)), np.empty(len(batch))
    last: dict[int, int] = {}  # row -> the step of the example that last touched it
    expired = 0
    clicks = 0.0
    for t in range(len(batch)):
        lo, hi = batch.indptr[t], batch.indptr[t + 1]
        rows, values = np.searchsorted(features.ids, batch.ids[lo:hi]), batch.values[lo:hi]
        for row in set(rows.tolist()):
            if row in last and (t + 1) - last[row] > span:  # untouched for more than span
                state[row], expired = 0.0, expired + 1
                del last[row]
        w = rule.weights(state[rows], t, params).tolist()
        s = 0.0
        for w_i, x_i in zip(w, values.tolist(), strict=True):
            s += w_i * x_i
        s += math.log((clicks + 0.5) / (t - clicks + 0.5))  # the base-rate prior (its default)
        p = 1.0 / (1.0 + math.exp(-min(max(s, -LOGIT_CLIP), LOGIT_CLIP)))
        probabilities[t] = p
        clicks += batch.labels[t]
        for row, x_i in zip(rows.tolist(), values.tolist(), strict=True):
            g = np.array([(p - batch.labels[t]) * x_i])
            state[[row]] = rule.update(state[[row]], g, g * g, t + 1, params)
            last[row] = t + 1
    end = len(batch)
    held = {row for row, step in last.items() if step + span > end}
    expired += len(last) - len(held)
    return probabilities, {int(features.ids[r]): state[r] for r in sorted(held)}, expired


def compiled(
    name: str, span: int, sizes: int = ROWS, admission: str = "all"
) -> tuple[Array, dict[int, Array], int, InMemoryModel]:
    """The same through the in-process model, in batches of ``sizes`` examples."""
    rule, (batch, _) = RULES[name], criteo()
    model = InMemoryModel(
        rule, rule.params(**PARAMS[name]), admission=Admission.parse(admission), expire_after=span
    )
    probabilities = [
        model.learn(batch.examples(start, min(start + sizes, len(batch)))).probabilities
        for start in range(0, len(batch), sizes)
    ]
    width = len(rule.fields)
    held = {i: row[:width] for i, row in model.snapshot().items()}
    return np.concatenate(probabilities), held, model.features_expired(), model


@pytest.mark.parametrize("name", sorted(RULES))
def test_the_kernel_expires_as_the_literal_rule_bit_for_bit(name: str) -> None:
    want_p, want_state, want_expired = literal(name, SPAN)
    got_p, got_state, got_expired, model = compiled(name, SPAN)
    np.testing.assert_array_equal(got_p, want_p)
    assert sorted(got_state) == sorted(want_state)
    for feature, row in want_state.items():
        np.testing.assert_array_equal(got_state[feature], row)
    assert got_expired == want_expired
    # Expiry ran: features expired, and the model holds fewer than it met.
    _, features = criteo()
    assert got_expired > 100 and BIAS_ID in got_state
    assert model.features_tracked() == len(want_state) < len(features.ids)


@pytest.mark.parametrize("admission", ["all", "bloom:2", "poisson:0.3"])
@pytest.mark.parametrize("sizes", [1, 7, 512])
def test_the_batch_size_changes_nothing(admission: str, sizes: int) -> None:
    whole = compiled("ftrl", SPAN, admission=admission)
    parts = compiled("ftrl", SPAN, sizes, admission=admission)
    np.testing.assert_array_equal(parts[0], whole[0])
    assert sorted(parts[1]) == sorted(whole[1])
    for feature, row in whole[1].items():
        np.testing.assert_array_equal(parts[1][feature], row)
    assert parts[2] == whole[2] > 0
    assert parts[3].nonzero_weights() == whole[3].nonzero_weights()
    assert parts[3].dropped == whole[3].dropped


def test_a_span_longer_than_the_stream_is_no_expiry_bit_for_bit() -> None:
    rule, (batch, _) = RULES["rda"], criteo()
    never = InMemoryModel(rule, rule.params(**PARAMS["rda"]))
    long = InMemoryModel(rule, rule.params(**PARAMS["rda"]), expire_after=ROWS)
    np.testing.assert_array_equal(long.learn(batch).probabilities, never.learn(batch).probabilities)
    width = len(rule.fields)
    assert {i: r[:width].tolist() for i, r in long.snapshot().items()} == {
        i: r[:width].tolist() for i, r in never.snapshot().items()
    }
    assert long.features_expired() == 0
    assert long.nonzero_weights() == never.nonzero_weights()


def test_an_expired_feature_is_gone_from_predictions_and_counts() -> None:
    """After the span, a model that learned nothing more predicts as a new one (with the base
    rate it learned: its prior is no feature, and does not expire); the counts of
    features held and nonzero weights fall to zero, and every feature counts as expired."""
    rule, (batch, _) = RULES["ftrl"], criteo()
    model = InMemoryModel(rule, expire_after=SPAN)
    model.learn(batch.examples(0, 200))
    assert model.features_tracked() > 0 and model.nonzero_weights() > 0
    held = model.features_tracked()
    assert (model.predict(batch.examples(0, 5)) != 0.5).any()
    model.t += SPAN  # the step moves on without touching anything
    assert model.features_tracked() == 0 and model.nonzero_weights() == 0
    assert model.features_expired() == pytest.approx(model.expired + held)
    # As a new model with the base rate learned so far: its prior alone.
    prior = sigmoid(np.full(5, model.base_rate.logit(model.base)))
    np.testing.assert_array_equal(model.predict(batch.examples(0, 5)), prior)


def test_with_admission_an_expired_feature_waits_to_be_admitted_again() -> None:
    """Under bloom:2 a feature met again after it expired is admitted at once (its counts are
    kept), under poisson:0.3 it is drawn again: so poisson holds fewer after expiring."""
    bloom = compiled("ftrl", SPAN, admission="bloom:2")[3]
    poisson = compiled("ftrl", SPAN, admission="poisson:0.3")[3]
    plain = compiled("ftrl", SPAN)[3]
    assert poisson.features_tracked() < bloom.features_tracked() <= plain.features_tracked()
    assert poisson.dropped > 0


@pytest.mark.parametrize("value", [-1, 1.5, True, "10", MOST + 1])
def test_a_bad_span_is_refused_naming_it(value: object) -> None:
    with pytest.raises(ValueError, match="expire_after must be a whole number of examples"):
        check_expire_after(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "says"),
    [({"minibatch": True}, "example by example"), ({"encoding": "compact"}, "float64")],
)
def test_expiry_refuses_what_it_cannot_do(options: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        InMemoryModel(RULES["ftrl"], expire_after=10, **options)  # type: ignore[arg-type]


def test_live_is_the_span_after_the_last_touch() -> None:
    tau = np.array([0.0, 1.0, 10.0, 11.0])
    assert live(tau, 10, 0).tolist() == [False, True, True, True]
    # After 20 examples a feature last touched by the 10th is gone with a span of 10: the
    # 11th to 20th did not touch it, and the 21st would find it expired.
    assert live(tau, 20, 10).tolist() == [False, False, False, True]


def test_replay_expires_as_the_in_process_model(capsys: pytest.CaptureFixture[str]) -> None:
    """``online-ctr replay --expire-after`` is the in-process model with it, and reports the
    features held at the end and how many expired."""
    flags = ("--limit", ROWS, "--expire-after", SPAN, "--numeric", "raw")
    assert run_replay(CRITEO, *flags) == 0
    out = last_json(capsys)
    _, held, expired, model = compiled("ftrl", SPAN)
    assert out["expire_after"] == SPAN
    assert out["features_tracked"] == len(held) and out["features_expired"] == expired
    assert out["nonzero_weights"] == model.nonzero_weights()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--expire-after", "-3"], "--expire-after: expire_after must be a whole number"),
        (["--expire-after", "5", "--minibatch"], "drop --minibatch"),
        (["--expire-after", "5", "--encoding", "compact"], "the float64 encoding"),
        (["--expire-after", "5", "--sweep", "alpha=0.1,0.2"], "cannot be combined with --sweep"),
    ],
)
def test_replay_refuses_what_it_cannot_expire(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_replay(CRITEO, "--limit", 10, *flags) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
