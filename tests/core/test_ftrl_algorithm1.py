"""FTRL-Proximal against a literal transcription of McMahan et al. 2013, Algorithm 1.

The transcription works on plain dicts, one example at a time; the model runs the compiled
sequential kernel, here in batches of one through the replay. Same features (the same reader
and hasher), same hyper-parameters, same logit clip, same libm ``exp`` and ``sqrt`` and the same
order of the sum ``w . x``: on this file the predictions are identical (``test_sequential``
asserts that, in one batch of 10,000). The tolerance of 1e-9 leaves room for other platforms
and still catches any real difference: changing l2 by one part in 10^4 already moves some
prediction by 4e-7, and a wrong sign or ordering in the update far more.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.learner import LOGIT_CLIP
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import BatchProgress, replay
from online_ctr.learning.rules import get_rule

ALPHA, BETA, L1, L2 = 0.05, 1.0, 1.0, 0.5
TOLERANCE = 1e-9


def algorithm_1(
    stream: Iterable[tuple[dict[int, float], int]],
) -> Iterator[tuple[float, dict[int, float]]]:
    """Per example: the prediction ``p_t``, and the weights it used (Algorithm 1, literally)."""
    z: dict[int, float] = {}
    n: dict[int, float] = {}
    for x, y in stream:
        w = {}
        for i in x:
            z_i, n_i = z.get(i, 0.0), n.get(i, 0.0)
            if abs(z_i) <= L1:
                w[i] = 0.0
            else:
                w[i] = -(z_i - math.copysign(L1, z_i)) / ((BETA + math.sqrt(n_i)) / ALPHA + L2)
        s = max(-LOGIT_CLIP, min(LOGIT_CLIP, sum(x[i] * w[i] for i in x)))
        p = 1.0 / (1.0 + math.exp(-s))
        for i in x:
            g = (p - y) * x[i]
            sigma = (math.sqrt(n.get(i, 0.0) + g * g) - math.sqrt(n.get(i, 0.0))) / ALPHA
            z[i] = z.get(i, 0.0) + g - sigma * w[i]
            n[i] = n.get(i, 0.0) + g * g
        yield p, w


def featurized(path: Path) -> Iterator[tuple[dict[int, float], int]]:
    """Each example as ``{feature id: x}``, with the ids the model's hasher gives it."""
    hasher = FeatureHasher()
    for example, label in read_examples(path, "criteo"):
        batch = hasher.batch([example])
        yield dict(zip(batch.ids.tolist(), batch.values.tolist(), strict=True)), label


@pytest.mark.oracle
def test_in_memory_ftrl_follows_algorithm_1_on_criteo(data_dir: Path) -> None:
    path = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    literal: list[float] = []
    weights: list[float] = []
    for p, w in algorithm_1(featurized(path)):
        literal.append(p)
        weights.extend(w.values())
    labels = np.array([label for _, label in read_examples(path, "criteo")])
    losses = np.where(labels == 1, -np.log(literal), -np.log1p(-np.array(literal)))

    rule = get_rule("ftrl")
    model = InMemoryModel(rule, rule.params(alpha=ALPHA, beta=BETA, l1=L1, l2=L2))
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
