"""Vowpal Wabbit's ``--ftrl`` as an oracle for our FTRL-Proximal at B = 1 on real Criteo data.

VW gets exactly our features (``loadtests/bench/_vw.py``): one VW feature per ``field=value``, VW's
constant feature as our bias, logistic loss on labels -1/+1, nothing that changes the math. Its
scores are taken before each update, and both sides' log loss is computed by our own function.

What is left between the two is VW's arithmetic: it keeps ``w``, ``z`` and ``n`` in float32
(``ftrl.cc``), which moves each probability by a few 1e-7 over this file. Measured (VW 9.11,
Criteo head 10k): the log-loss gap is about 1e-9 and the largest per-example probability gap
2.4e-7 for every setting below. The issue's tolerance on the log loss is 2e-4; the per-example
bound, 1e-5, is 40x float32's drift here and 4000x below what dropping the bias does to some
predictions (``test_the_oracle_notices_a_missing_bias``). VW follows Algorithm 1 in every detail
we checked: it stores ``w`` after each update where we recompute it from ``(z, n)``, which is the
same number; its ``l1`` and ``l2`` are used unscaled; ``-l``, ``--power_t`` and ``--initial_t``
change nothing.

Things that do break the agreement, found on the way: labels 0/1 (VW 9 reads 0 as half a
positive; +0.34 log loss), ``--noconstant`` (+2.7e-4), ``--min_prediction -1 --max_prediction 1``
(+0.06). VW's own hashing of the feature names at 32 bits collides one pair of the 44,251 names
on this file; with l1 = 0 that moves the log loss by 1.4e-6 and some predictions by up to 8e-3.
The comparisons therefore give each name its own index (no hashing), and the hashed variant is
checked against the issue's tolerance only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from loadtests.bench import _vw
from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import log_loss, sigmoid
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule

# loadtests/ is not an installed package; pytest's `pythonpath = ["."]` would make this moot.
from testkit.paths import CRITEO

pytestmark = pytest.mark.oracle


#: The issue's bound on the progressive log-loss gap.
LOG_LOSS_TOLERANCE = 2e-4
#: Our bound on any one example's probability gap (float32 drift is ~2.4e-7 here).
PROBABILITY_TOLERANCE = 1e-5

#: (alpha, beta, l1, l2): the issue's setting, no regularization, and a mixed one.
SETTINGS = [(0.1, 1.0, 1.0, 1.0), (0.1, 1.0, 0.0, 0.0), (0.05, 1.0, 0.5, 2.0)]

LabelledExamples = list[tuple[dict[str, str | float], int]]
Setting = tuple[float, float, float, float]
RecordProperty = Callable[[str, object], None]


@pytest.fixture(scope="module")
def rows() -> LabelledExamples:
    return list(read_examples(CRITEO, "criteo"))


@pytest.fixture(scope="module")
def labels(rows: LabelledExamples) -> np.ndarray:
    return np.array([label for _, label in rows], dtype=np.float64)


@pytest.fixture(scope="module")
def indexed_lines(rows: LabelledExamples) -> list[str]:
    """VW lines with each distinct feature name as its own integer index."""
    encoder = _vw.TextEncoder(by_index=True)
    lines = encoder.lines(rows)
    assert 0 < len(encoder.index) < _vw.CONSTANT_INDEX  # no index can meet VW's constant
    return lines


_OURS: dict[Setting, np.ndarray] = {}


def ours(rows: LabelledExamples, setting: Setting) -> np.ndarray:
    """Our progressive probabilities at B = 1 (memoized: several tests compare against them)."""
    if setting not in _OURS:
        alpha, beta, l1, l2 = setting
        rule = get_rule("ftrl")
        params = rule.params(alpha=alpha, beta=beta, l1=l1, l2=l2)
        model = InMemoryModel(rule, params, base_rate=BaseRate("off"))  # VW has no prior
        hasher = FeatureHasher()
        _OURS[setting] = np.concatenate(
            [model.learn(hasher.batch([example], [label])).probabilities for example, label in rows]
        )
    return _OURS[setting]


def vw_probabilities(arguments: Sequence[str], lines: Sequence[str]) -> np.ndarray:
    vw = _vw.workspace(arguments)
    scores = _vw.predict_then_learn(vw, lines)
    vw.finish()
    return sigmoid(scores)


def mean_log_loss(p: np.ndarray, y: np.ndarray) -> float:
    return float(log_loss(p, y).mean())


def test_vw_predict_before_learn_is_the_progressive_score(
    indexed_lines: list[str], labels: np.ndarray, tmp_path: Path
) -> None:
    lines, y = indexed_lines[:2000], labels[:2000]
    arguments = _vw.ftrl_arguments(0.1, 1.0, 1.0, 1.0)
    vw = _vw.workspace(arguments)
    before = _vw.predict_then_learn(vw, lines)
    vw_average = _vw.average_loss(vw)
    vw.finish()
    assert before[0] == 0.0  # nothing learned yet: the constant's weight is 0 too
    # learn() computes its own prediction before updating, and reports the same numbers...
    vw = _vw.workspace(arguments)
    assert np.array_equal(_vw.learn_scores(vw, lines), before)
    vw.finish()
    # ...as does VW's native driver over a data file, by its own progressive loss.
    data = tmp_path / "head.vw"
    _vw.write_lines(data, lines)
    vw = _vw.workspace([*arguments, f"--data={data}"])
    driver_average = _vw.average_loss(vw)
    vw.finish()
    assert driver_average == vw_average
    assert vw_average == pytest.approx(mean_log_loss(sigmoid(before), y), abs=1e-8)
    # Scores taken after learning each example are different, and too good: not progressive.
    vw = _vw.workspace(arguments)
    after = []
    for line in lines:
        example = vw.parse(line)
        vw.learn(example)
        after.append(vw.predict(example))
        vw.finish_example(example)
    vw.finish()
    assert np.mean(np.array(after) != before) > 0.9
    assert mean_log_loss(sigmoid(np.array(after)), y) < mean_log_loss(sigmoid(before), y) - 0.01


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "a{}-b{}-l1_{}-l2_{}".format(*s))
def test_ftrl_progressive_log_loss_matches_vw(
    rows: LabelledExamples,
    labels: np.ndarray,
    indexed_lines: list[str],
    setting: Setting,
    record_property: RecordProperty,
) -> None:
    mine = ours(rows, setting)
    theirs = vw_probabilities(_vw.ftrl_arguments(*setting), indexed_lines)
    gap = mean_log_loss(mine, labels) - mean_log_loss(theirs, labels)
    largest = float(np.max(np.abs(mine - theirs)))
    record_property("log_loss_gap", gap)
    record_property("max_probability_gap", largest)
    print(f"FTRL {setting}: log-loss gap to VW {gap:+.2e}, largest probability gap {largest:.1e}")
    assert abs(gap) < LOG_LOSS_TOLERANCE
    assert largest < PROBABILITY_TOLERANCE


def test_vw_hashing_its_own_names_stays_within_tolerance(
    rows: LabelledExamples, labels: np.ndarray, record_property: RecordProperty
) -> None:
    setting = SETTINGS[0]
    encoder = _vw.TextEncoder()
    lines = encoder.lines(rows)
    names = {name for example, _ in rows for name in _vw.named_features(example)}
    colliding = _vw.colliding_names(names, _vw.NAME_BITS)
    theirs = vw_probabilities(_vw.ftrl_arguments(*setting, bits=_vw.NAME_BITS), lines)
    gap = mean_log_loss(ours(rows, setting), labels) - mean_log_loss(theirs, labels)
    record_property("colliding_names", colliding)
    record_property("log_loss_gap", gap)
    print(f"VW hash: {colliding} of {len(names)} names share an index; gap {gap:+.2e}")
    assert colliding < 10  # 2 here: one pair
    assert abs(gap) < LOG_LOSS_TOLERANCE


def test_the_oracle_notices_a_missing_bias(
    rows: LabelledExamples, indexed_lines: list[str], labels: np.ndarray
) -> None:
    setting = SETTINGS[0]
    theirs = vw_probabilities([*_vw.ftrl_arguments(*setting), "--noconstant"], indexed_lines)
    assert np.max(np.abs(ours(rows, setting) - theirs)) > 100 * PROBABILITY_TOLERANCE  # 0.04
