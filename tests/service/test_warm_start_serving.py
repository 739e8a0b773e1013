"""``train-batch --out`` seeds an online model: imported, it predicts what the batch model does."""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from online_ctr.cli.main import main
from online_ctr.config.settings import Settings
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.owlqn import design_from_batch, minimize
from online_ctr.learning.readers import read_examples
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

TRAIN, C = 1500, 1.0
ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), TRAIN + 200))


@pytest.mark.parametrize(
    ("rule", "params"), [("ftrl", {"l1": 1.0, "l2": 0.5}), ("rda", {"l1": 0.001, "gamma": 2.0})]
)
def test_an_imported_warm_start_predicts_as_the_batch_model(
    rule: str,
    params: dict[str, float],
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "warm.octr"
    flags = [f"--rule-param={name}={value}" for name, value in params.items()]
    argv = ["train-batch", str(CRITEO), "--limit", str(TRAIN), "--l1", str(C), "--rule", rule]
    assert main([*argv, "--out", str(out), *flags]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["out"] == str(out)

    # The batch model, fitted again here exactly as train-batch fits it (deterministic).
    hasher = FeatureHasher()
    train = hasher.batch([x for x, _ in ROWS[:TRAIN]], [y for _, y in ROWS[:TRAIN]])
    design = design_from_batch(train)
    w = minimize(design, C, max_iter=1000, tol=1e-6).w
    unseen = [x for x, _ in ROWS[TRAIN:]]
    batch = hasher.batch(unseen)
    column = np.searchsorted(design.ids, batch.ids).clip(max=len(design.ids) - 1)
    weights = np.where(design.ids[column] == batch.ids, w[column], 0.0)
    expected = np.bincount(batch.rows(), weights * batch.values, len(batch))

    settings = Settings(redis_url=redis_url, rule=rule, state_buckets=64, **params, **AUTH)
    with TestClient(create_app(settings, CollectorRegistry()), headers=HEADERS) as client:
        imported = client.put("/models/default/snapshot?replace=true", content=out.read_bytes())
        assert imported.status_code == 201, imported.text
        assert imported.json()["nonzero_weights"] == int(np.count_nonzero(w))
        body = {"examples": [{"features": x} for x in unseen]}
        answer = client.post("/predict", json=body)
    logits = np.array([p["logit"] for p in answer.json()["predictions"]])
    assert np.ptp(expected) > 0.5  # the batch model tells these examples apart
    # The seeded weights are w up to the rounding of the inversion (tests/core/test_warm_start),
    # and a logit sums them in another order: equal to ~1e-12 relative.
    np.testing.assert_allclose(logits, np.clip(expected, -35, 35), rtol=1e-12, atol=1e-12)
