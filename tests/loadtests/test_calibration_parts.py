"""The calibration measurement's parts: ECE, the Open Bandit rows, one file measured."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from loadtests.costs.calibration import FILES, ece, measure, obd_rows, report
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule


def test_ece_is_the_mean_absolute_gap_over_equal_count_bins() -> None:
    p = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    y = np.array([0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    # Bins {0.1, 0.2}, {0.3, 0.4}, {0.5, 0.6}: gaps 0.3, 0.3, 0.9.
    assert ece(p, y, bins=3) == pytest.approx(1.5 / 6, rel=1e-15)
    assert ece(y, y, bins=3) == 0.0


def test_every_click_log_in_the_data_folder_is_measured(data_dir: Path) -> None:
    logs = {str(path.relative_to(data_dir)) for path in data_dir.rglob("*.*")}
    not_logs = {"README.md", "ipinyou/featindex.fm.txt"}
    not_logs |= {f"obd/obd_random_{who}_item_context.csv" for who in ("men", "women")}
    assert logs - not_logs == set(FILES)


def test_open_bandit_rows_are_categories_with_the_click_as_label(data_dir: Path) -> None:
    rows = list(obd_rows(data_dir / "obd" / "obd_random_men.csv"))
    assert len(rows) == 10_000 and sum(label for _, label in rows) == 46
    example, label = rows[0]
    assert example["item_id"] == "14" and example["position"] == "3" and label == 0
    assert all(isinstance(value, str) for value in example.values())


def test_one_file_measured_before_and_after(data_dir: Path) -> None:
    path = data_dir / "criteo" / "criteo_deepctr_sample200.csv"
    measured = measure(path, None, "ftrl", batch_size=50)
    assert (measured.examples, measured.clicks) == (200, 49)
    # The raw column is the plain progressive replay's.
    rows = list(read_examples(path, "criteo"))
    model = InMemoryModel(get_rule("ftrl"))
    p = model.learn(FeatureHasher().batch([x for x, _ in rows], [y for _, y in rows]))
    assert measured.raw.logloss == pytest.approx(float(p.losses.mean()), rel=1e-12)
    assert measured.raw.ratio == pytest.approx(float(p.probabilities.sum() / 49), rel=1e-12)
    assert math.isfinite(measured.calibrated.logloss) and measured.kappa >= 0
    assert "criteo_deepctr_sample200.csv | 200 | 49 |" in report([measured])
