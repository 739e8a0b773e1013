"""FTRL-Proximal against a literal transcription of McMahan et al. 2013, Algorithm 1.

The transcription works on plain dicts, one example at a time; the model runs the compiled
sequential kernel, here in batches of one through the replay. Same features (the same reader
and hasher), same hyper-parameters, same logit clip, same libm ``exp`` and ``sqrt`` and the same
order of the sum ``w . x``: on this file the predictions are identical (``test_sequential``
asserts that, in one batch of 10,000). The tolerance of 1e-9 leaves room for other platforms
and still catches any real difference: changing l2 by one part in 10^4 already moves some
prediction by 4e-7, and a wrong sign or ordering in the update far more.

With the base-rate prior (``online_ctr.learning.base_rate``, the model's default), the
transcription has one change: the log-odds of the running click rate, ``(c + 1/2) / (m + 1)``
over the examples before, added to the sum ``w . x`` (the weights learn the residual).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import LOGIT_CLIP
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import BatchProgress, replay
from online_ctr.learning.rules import get_rule

ALPHA, BETA, L1, L2 = 0.05, 1.0, 1.0, 0.5
TOLERANCE = 1e-9


def algorithm_1(
    stream: Iterable[tuple[dict[int, float], int]], prior: bool = False
) -> Iterator[tuple[float, dict[int, float]]]:
    """Per example: the prediction ``p_t``, and the weights it used (Algorithm 1, literally;
    with ``prior``, the running mean's log-odds added to each logit)."""
    z: dict[int, float] = {}
    n: dict[int, float] = {}
    clicks = examples = 0.0
    for x, y in stream:
        w = {}
        for i in x:
            z_i, n_i = z.get(i, 0.0), n.get(i, 0.0)
            if abs(z_i) <= L1:
                w[i] = 0.0
            else:
                w[i] = -(z_i - math.copysign(L1, z_i)) / ((BETA + math.sqrt(n_i)) / ALPHA + L2)
        s = sum(x[i] * w[i] for i in x)
        if prior:
            s += math.log((clicks + 0.5) / (examples - clicks + 0.5))
        s = max(-LOGIT_CLIP, min(LOGIT_CLIP, s))
        p = 1.0 / (1.0 + math.exp(-s))
        clicks, examples = clicks + y, examples + 1.0
        for i in x:
            g = (p - y) * x[i]
            sigma = (math.sqrt(n.get(i, 0.0) + g * g) - math.sqrt(n.get(i, 0.0))) / ALPHA
            z[i] = z.get(i, 0.0) + g - sigma * w[i]
            n[i] = n.get(i, 0.0) + g * g
        yield p, w


def featurized(path: Path, fmt: str = "criteo") -> Iterator[tuple[dict[int, float], int]]:
    """Each example as ``{feature id: x}``, with the ids the model's hasher gives it."""
    hasher = FeatureHasher()
    for example, label in read_examples(path, fmt):
        batch = hasher.batch([example])
        yield dict(zip(batch.ids.tolist(), batch.values.tolist(), strict=True)), label


@pytest.mark.oracle
@pytest.mark.parametrize("base_rate", ["off", "mean"])
def test_in_memory_ftrl_follows_algorithm_1_on_criteo(data_dir: Path, base_rate: str) -> None:
    path = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    literal: list[float] = []
    weights: list[float] = []
    for p, w in algorithm_1(featurized(path), prior=base_rate == "mean"):
        literal.append(p)
        weights.extend(w.values())
    labels = np.array([label for _, label in read_examples(path, "criteo")])
    losses = np.where(labels == 1, -np.log(literal), -np.log1p(-np.array(literal)))

    rule = get_rule("ftrl")
    params = rule.params(alpha=ALPHA, beta=BETA, l1=L1, l2=L2)
    model = InMemoryModel(rule, params, base_rate=BaseRate.parse(base_rate))
    predictions: list[float] = []

    def record(progress: BatchProgress) -> None:
        predictions.extend(progress.probabilities.tolist())

    result = replay(read_examples(path, "criteo"), model, FeatureHasher(), 1, on_batch=record)

    assert len(predictions) == len(literal) == 10_000
    assert np.max(np.abs(np.array(predictions) - np.array(literal))) <= TOLERANCE
    assert result.logloss == pytest.approx(losses.mean(), abs=TOLERANCE)
    # The comparison must exercise both branches of the weight (|z| <= l1 and not), and learn.
    assert 0.2 < np.mean(np.array(weights) == 0) < 0.9
    assert result.logloss is not None
    assert result.logloss < math.log(2) - 0.1


@pytest.mark.oracle
def test_the_prior_follows_the_transcription_on_ipinyou_and_beats_the_mean(data_dir: Path) -> None:
    """On the 0.95% CTR log, the default model (with its prior) is Algorithm 1 plus the
    running mean's log-odds, prediction for prediction, and it beats both the running mean
    and itself without the prior, with its predictions adding up to the clicks within 1%."""
    path = data_dir / "ipinyou" / "ipinyou_train.fm.txt"
    literal = np.array([p for p, _ in algorithm_1(featurized(path, "libfm"), prior=True)])
    rule = get_rule("ftrl")
    params = rule.params(alpha=ALPHA, beta=BETA, l1=L1, l2=L2)
    results = {}
    for base_rate in ("mean", "off"):
        model = InMemoryModel(rule, params, base_rate=BaseRate.parse(base_rate))
        rows = read_examples(path, "libfm")
        results[base_rate] = replay(rows, model, FeatureHasher(), 4096)
    predicted: list[float] = []
    model = InMemoryModel(rule, params)
    replay(
        read_examples(path, "libfm"),
        model,
        FeatureHasher(),
        1,
        on_batch=lambda b: predicted.extend(b.probabilities.tolist()),
    )
    assert np.max(np.abs(np.array(predicted) - literal)) <= TOLERANCE
    labels = np.array([label for _, label in read_examples(path, "libfm")], np.float64)
    mean = (np.cumsum(labels) - labels + 0.5) / (np.arange(len(labels)) + 1.0)
    mean_loss = float(np.mean(np.where(labels == 1, -np.log(mean), -np.log1p(-mean))))
    with_prior, without = results["mean"], results["off"]
    assert with_prior.logloss is not None and without.logloss is not None
    assert with_prior.logloss < mean_loss < without.logloss
    assert abs(with_prior.calibration - 1.0) < 0.01
