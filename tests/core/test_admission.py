"""Feature admission (McMahan et al. 2013, section 4.1) in the compiled learner, against a
literal transcription: the numpy rule applied one example at a time, a feature not admitted
contributing 0 and its gradient dropped, the Poisson draw and the Bloom counts written out
in Python. Bit for bit, for every rule; the same at every batch size; the bias always in.
"""

from __future__ import annotations

import math
from functools import cache
from itertools import islice

import numpy as np
import pytest

from online_ctr.learning.admission import (
    COUNTERS,
    Admission,
    admitting,
    bloom_positions,
    empty_counters,
    poisson_uniform,
)
from online_ctr.learning.features import BIAS, Batch, FeatureHasher
from online_ctr.learning.learner import LOGIT_CLIP, Features, unique_features
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import RULES
from online_ctr.learning.rules.base import Array
from online_ctr.learning.sequential import learn_sequential
from testkit.paths import CRITEO
from tests.core.test_replay_command import last_json
from tests.core.test_replay_command import run as run_replay
from tests.core.test_sequential import PARAMS

ROWS = 1500
RULES_AND_ADMISSIONS = [
    (name, text)
    for name in sorted(RULES)
    for text in ("poisson:0.3", "bloom:2", "bloom:3", "bloom:3:100")
]
BIAS_ID = FeatureHasher().id(BIAS)


@cache
def criteo(rows: int = ROWS) -> tuple[Batch, Features]:
    examples = list(islice(read_examples(CRITEO, "criteo"), rows))
    batch = FeatureHasher().batch([x for x, _ in examples], [y for _, y in examples])
    return batch, unique_features(batch)


def literal(name: str, admission: Admission) -> tuple[Array, Array, set[int], int]:
    """Probabilities, final state, the admitted ids and the dropped gradients, one example at
    a time in plain Python over the numpy rule."""
    rule, (batch, features) = RULES[name], criteo()
    params = rule.params(**PARAMS[name])
    state, probabilities = rule.zeros(len(features.ids)), np.empty(len(batch))
    admitted, counters, dropped = {BIAS_ID}, np.zeros(COUNTERS, np.int64), 0
    for t in range(len(batch)):
        if admission.halve_every and t > 0 and t % admission.halve_every == 0:
            counters //= 2  # after every halve_every examples, each count halved
        lo, hi = batch.indptr[t], batch.indptr[t + 1]
        ids, values = batch.ids[lo:hi].tolist(), batch.values[lo:hi].tolist()
        rows = np.searchsorted(features.ids, batch.ids[lo:hi])
        w = rule.weights(state[rows], t, params).tolist()
        s = 0.0
        for feature, w_i, x_i in zip(ids, w, values, strict=True):
            if feature in admitted:
                s += w_i * x_i
        p = 1.0 / (1.0 + math.exp(-min(max(s, -LOGIT_CLIP), LOGIT_CLIP)))
        probabilities[t] = p
        for feature, row, x_i in zip(ids, rows.tolist(), values, strict=True):
            if feature not in admitted:
                one = np.array([feature], np.uint64)
                if admission.kind == "poisson":
                    admit = poisson_uniform(one, np.array([t + 1]))[0] < admission.p
                else:
                    where = bloom_positions(one)[0]
                    counters[where] = np.minimum(counters[where] + 1, 255)
                    admit = counters[where].min() >= admission.n
                if not admit:
                    dropped += 1
                    continue
                admitted.add(feature)
            g = np.array([(p - batch.labels[t]) * x_i])
            state[[row]] = rule.update(state[[row]], g, g * g, t + 1, params)
    return probabilities, state, admitted, dropped


def compiled(
    name: str, admission: Admission, sizes: int = ROWS
) -> tuple[Array, Array, set[int], int]:
    """The same through ``learn_sequential``, in batches of ``sizes`` examples."""
    rule, (batch, features) = RULES[name], criteo()
    params = rule.params(**PARAMS[name])
    state = rule.zeros(len(features.ids))
    admitted = features.ids == np.uint64(BIAS_ID)
    counters = empty_counters() if admission.counted else None
    probabilities, dropped = [], 0
    for start in range(0, len(batch), sizes):
        part = batch.examples(start, min(start + sizes, len(batch)))
        own = unique_features(part)
        at = np.searchsorted(features.ids, own.ids)
        argument = admitting(admission, own.ids, admitted[at], counters)
        learned = learn_sequential(rule, params, state[at], start, part, own, admission=argument)
        state[at] = learned.state
        admitted[at] = argument.admitted_rows()
        dropped += argument.dropped_count()
        probabilities.append(learned.probabilities)
    ids = set(features.ids[admitted].tolist())
    return np.concatenate(probabilities), state, ids, dropped


@pytest.mark.parametrize(("name", "text"), RULES_AND_ADMISSIONS)
def test_the_kernel_admits_as_the_literal_rule_bit_for_bit(name: str, text: str) -> None:
    admission = Admission.parse(text)
    want_p, want_state, want_ids, want_dropped = literal(name, admission)
    got_p, got_state, got_ids, got_dropped = compiled(name, admission)
    np.testing.assert_array_equal(got_p, want_p)
    np.testing.assert_array_equal(got_state, want_state)
    assert got_ids == want_ids and got_dropped == want_dropped
    # The rule ran on both sides: some features admitted, some still waiting, some dropped.
    _, features = criteo()
    assert BIAS_ID in got_ids and 1 < len(got_ids) < len(features.ids) and got_dropped > 0


@pytest.mark.parametrize("text", ["poisson:0.3", "bloom:2", "bloom:2:100"])
@pytest.mark.parametrize("sizes", [1, 7, 512])
def test_the_batch_size_changes_nothing(text: str, sizes: int) -> None:
    admission = Admission.parse(text)
    whole = compiled("ftrl", admission)
    parts = compiled("ftrl", admission, sizes)
    np.testing.assert_array_equal(parts[0], whole[0])
    np.testing.assert_array_equal(parts[1], whole[1])
    assert parts[2:] == whole[2:]


def test_halving_forgets_features_that_do_not_recur() -> None:
    """Halved every 100 examples, a count of 2 made over a longer gap is not 3: fewer features
    are admitted than by bloom:3 alone, and none that bloom:3 does not admit."""
    _, _, kept, _ = compiled("ftrl", Admission.parse("bloom:3"))
    _, _, forgetting, _ = compiled("ftrl", Admission.parse("bloom:3:100"))
    assert forgetting < kept and len(kept) - len(forgetting) > 100


def test_a_feature_not_admitted_has_no_state_and_no_weight() -> None:
    _, state, ids, _ = compiled("ftrl", Admission.parse("bloom:3"))
    _, features = criteo()
    waiting = ~np.isin(features.ids, np.array(sorted(ids), np.uint64))
    assert waiting.any() and not state[waiting].any()


def test_all_admits_every_feature_as_before() -> None:
    """``all`` is the learner without admission, bit for bit."""
    rule, (batch, features) = RULES["ftrl"], criteo()
    params = rule.params(**PARAMS["ftrl"])
    plain = learn_sequential(rule, params, rule.zeros(len(features.ids)), 0, batch, features)
    got = compiled("ftrl", Admission())
    np.testing.assert_array_equal(got[0], plain.probabilities)
    np.testing.assert_array_equal(got[1], plain.state)


def test_poisson_admits_about_p_of_first_occurrences() -> None:
    """The draw is uniform: over 200,000 (id, step) pairs, the share below 0.03 is 0.03 within
    five standard deviations (sqrt(0.03 * 0.97 / 200,000) = 3.8e-4)."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 2**63, 200_000, dtype=np.int64).astype(np.uint64)
    u = poisson_uniform(ids, np.arange(200_000))
    assert abs(float(np.mean(u < 0.03)) - 0.03) < 5 * math.sqrt(0.03 * 0.97 / 200_000)
    assert u.min() >= 0.0 and u.max() < 1.0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("poisson:0", "probability"),
        ("poisson:1.5", "probability"),
        ("poisson:nan", "probability"),
        ("bloom:256", "count"),
        ("bloom:1.5", "count"),
        ("bloom:2:0", "the period D of bloom:N:D must be a whole number of examples from 1"),
        ("bloom:2:-5", "period D"),
        ("bloom:2:1.5", "period D"),
        ("bloom:2:", "period D"),
        ("bloom:2:4503599627370497", "period D"),
        ("bloom:2:3:4", "period D"),
        ("sometimes", "use all"),
        ("all:1", "use all"),
    ],
)
def test_a_bad_admission_is_refused_naming_it(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Admission.parse(text)


@pytest.mark.parametrize("text", ["bloom:2", "bloom:2:300", "poisson:0.3"])
def test_replay_admits_as_the_in_process_model(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``online-ctr replay --admission`` is the in-process model with the rule: the same
    features tracked and gradients dropped, the same log loss; and it reports them."""
    assert run_replay(CRITEO, "--limit", ROWS, "--admission", text, "--numeric", "raw") == 0
    out = last_json(capsys)
    rule = RULES["ftrl"]
    model = InMemoryModel(rule, rule.params(), admission=Admission.parse(text))
    batch, _ = criteo()
    learned = model.learn(batch)
    assert out["admission"] == text
    assert out["features_tracked"] == out["features_admitted"] == model.features_tracked()
    assert out["admission_dropped_gradients"] == model.dropped > 0
    assert out["features_pending_admission"] == model.features_pending()
    assert (out["features_pending_admission"] is None) == (text == "poisson:0.3")
    assert out["logloss"] == pytest.approx(float(learned.losses.mean()), rel=1e-12)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--admission", "bloom:0"], "--admission: admission 'bloom:0': the count must be"),
        (["--admission", "bloom:2", "--sweep", "alpha=0.1,0.2"], "--admission cannot be"),
        (["--admission", "bloom:2", "--minibatch"], "admission drops gradients"),
    ],
)
def test_replay_refuses_an_admission_it_cannot_apply(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_replay(CRITEO, "--limit", 100, *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err
