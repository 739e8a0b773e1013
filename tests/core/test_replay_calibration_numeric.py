"""``online-ctr replay --calibration`` and ``--numeric``: what they add to the JSON, and that
they mean what the service's OCTR_CALIBRATION and OCTR_NUMERIC mean."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from online_ctr.learning.calibration import Histogram
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule
from tests.core.test_replay_command import last_json, run


def test_calibration_power_reports_the_calibrated_metrics_and_fit(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    criteo = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    assert run(criteo, "--limit", 1000, "--batch-size", 100, "--calibration", "power") == 0
    result = last_json(capsys)
    calibrated = result["calibrated"]
    # The fit after the run is the fit of the progressive predictions' histogram.
    model = InMemoryModel(get_rule("ftrl"))
    rows = list(itertools.islice(read_examples(criteo, "criteo"), 1000))
    learned = model.learn(FeatureHasher().batch([x for x, _ in rows], [y for _, y in rows]))
    labels = np.array([float(y) for _, y in rows])
    fit = Histogram.empty().add(learned.probabilities, labels).fit()
    assert (calibrated["gamma"], calibrated["kappa"]) == (fit.gamma, fit.kappa)
    assert calibrated["logloss"] != result["logloss"] and 0.3 < calibrated["logloss"] < 0.7
    assert result["numeric"] == "log_bucket"


def test_without_calibration_there_is_none(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(data_dir / "criteo" / "criteo_deepctr_sample200.csv") == 0
    assert last_json(capsys)["calibrated"] is None


def test_a_one_hot_libfm_file_is_the_same_model_under_either_handling(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # iPinYou's idx:1 is the numeric feature idx (x = 1) raw, the category idx=1 bucketed.
    ipinyou = data_dir / "ipinyou" / "ipinyou_train.fm.txt"
    results = {}
    for numeric in ("raw", "log_bucket"):
        assert run(ipinyou, "--limit", 3000, "--numeric", numeric) == 0
        results[numeric] = last_json(capsys)
    assert results["raw"]["logloss"] == results["log_bucket"]["logloss"]
    assert results["raw"]["nonzero_weights"] == results["log_bucket"]["nonzero_weights"]


def test_an_unknown_handling_is_a_usage_error(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run(data_dir / "criteo" / "criteo_deepctr_sample200.csv", "--numeric", "standardize")
    assert exit_info.value.code == 2
    assert "--numeric: invalid choice: 'standardize'" in capsys.readouterr().err
