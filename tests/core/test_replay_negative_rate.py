"""``online-ctr replay --negative-rate R``: every click and the non-clicks the service would
keep for a model of negative rate ``R``, weighted ``1 / R``, learned and reported with the
weighted metrics (McMahan et al. 2013, section 4.4); at 1, the replay it always was."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from online_ctr.cli import replay as replay_command
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule
from online_ctr.learning.sampling import keep_negatives
from online_ctr.learning.stream_metrics import log_loss
from tests.core.test_replay_command import SPEED, Terminal, last_json, run


@pytest.fixture
def criteo(data_dir: Path) -> Path:
    return data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"


def whole_file(path: Path, limit: int | None = None) -> Batch:
    """The file as the command hashes it (``--numeric`` log_bucket, its default)."""
    rows = list(read_examples(path, "criteo", limit))
    return FeatureHasher(numeric="log_bucket").batch([x for x, _ in rows], [y for _, y in rows])


def without_speed(output: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in output.items() if key not in SPEED}


@pytest.mark.parametrize("flags", [[], ["--batch-size", 64, "--minibatch"], ["--passes", 2]])
def test_rate_one_is_the_replay_without_the_option(
    criteo: Path, capsys: pytest.CaptureFixture[str], flags: list[str | int]
) -> None:
    outputs = []
    for rate in ([], ["--negative-rate", "1"], ["--negative-rate", "1.0"]):
        assert run(criteo, "--limit", 3000, *flags, *rate) == 0
        outputs.append(without_speed(last_json(capsys)))
    assert outputs[1] == outputs[0] == outputs[2]
    read = 3000 * (2 if "--passes" in flags else 1)
    assert outputs[0]["negative_rate"] == 1.0
    assert outputs[0]["examples_read"] == outputs[0]["examples_learned"] == read
    assert outputs[0]["examples"] == read


def test_a_tenth_of_the_non_clicks_costs_a_few_percent_of_log_loss(
    criteo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On the Criteo head (10,000 rows, 2,182 clicks) at R = 0.1: 2,983 examples learned, weighted
    log loss 0.49324 against 0.47079 learning every example (+4.8%; +1.4% at R = 0.3), and
    calibration 1.037 against 1.007. The unweighted mean over the kept examples, three
    quarters of them clicks, would be far off: 1.09."""
    assert run(criteo) == 0
    full = last_json(capsys)
    assert run(criteo, "--negative-rate", "0.1") == 0
    sampled = last_json(capsys)
    batch = whole_file(criteo)
    kept = keep_negatives(batch, 0.1)
    assert (sampled["negative_rate"], sampled["examples_read"]) == (0.1, 10_000)
    assert sampled["examples_learned"] == sampled["examples"] == len(kept) == 2983
    assert sampled["positives"] == full["positives"] == 2182
    assert full["logloss"] < sampled["logloss"] < 1.06 * full["logloss"]
    assert abs(sampled["calibration"] - 1.0) < 0.05
    # What the command reports is the in-process model fed the kept examples, their
    # weights in the metrics (summed batch by batch there: rounding only).
    model = InMemoryModel(get_rule("ftrl"))
    learned = model.learn(kept)
    w = kept.example_weights()
    weighted = math.fsum(w * learned.losses) / math.fsum(w)
    assert sampled["logloss"] == pytest.approx(weighted, rel=1e-12)
    assert sampled["nonzero_weights"] == model.nonzero_weights()
    assert sampled["features_tracked"] == model.features_tracked()
    assert float(learned.losses.mean()) > 1.0


def test_the_weighted_log_loss_estimates_the_loss_on_every_example_read(criteo: Path) -> None:
    """The model learning the kept examples also predicts, before each example, the ones
    dropped: its log loss over all 10,000 is what the weighted figure estimates, unbiased
    since the hash, not the prediction, decides what is kept. The estimate's standard error
    is ``sqrt(sum over non-clicks of loss^2 (1 - R) / R) / N`` (each non-click's weight is
    ``1 / R`` with probability ``R``, else 0); measured at R = 0.1: 0.493238 estimated,
    0.493236 on every example, a standard error of 0.0082 (at R = 0.3: 0.477465 and 0.476439,
    0.0040)."""
    rate, batch = 0.1, whole_file(criteo)
    model = InMemoryModel(get_rule("ftrl"))
    every = np.empty(len(batch))
    weighted_losses, weights = [], []
    for j in range(len(batch)):
        one = batch.examples(j, j + 1)
        every[j] = model.predict(one)[0]
        kept = keep_negatives(one, rate)
        if len(kept):
            weight = float(kept.example_weights()[0])
            weighted_losses.append(weight * float(model.learn(kept).losses[0]))
            weights.append(weight)
    losses = log_loss(every, batch.labels)
    estimate, truth = math.fsum(weighted_losses) / math.fsum(weights), float(losses.mean())
    negatives = losses[batch.labels == 0]
    error = math.sqrt(float((negatives**2).sum()) * (1 - rate) / rate) / len(batch)
    assert abs(estimate - truth) <= 4 * error, (estimate, truth, error)


def test_either_reader_and_any_batch_size_keep_the_same_examples(
    criteo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The choice is the example's own: batches cut differently keep the same ones, so the
    model is the same to the bit (AUC, counts); the weighted sums are added batch by batch."""
    outputs = []
    for columns, size in ((True, 16_384), (False, 16_384), (False, 7)):
        monkeypatch.setattr(replay_command, "available", lambda columns=columns: columns)
        assert run(criteo, "--limit", 4000, "--negative-rate", "0.3", "--batch-size", size) == 0
        outputs.append(without_speed(last_json(capsys)))
    first = outputs[0]
    for other in outputs[1:]:
        for key in ("examples_learned", "auc", "nonzero_weights", "features_tracked"):
            assert other[key] == first[key], key
        for key in ("logloss", "calibration"):
            assert other[key] == pytest.approx(first[key], rel=1e-12, abs=0), key


def test_the_progress_bar_counts_the_examples_read(
    criteo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert run(criteo, "--limit", 1000, "--negative-rate", "0.2", "--batch-size", 100) == 0
    out = last_json(capsys)
    assert out["examples_learned"] < 1000
    end = "] 100% 1,000/1,000 log loss {:.4f}\n".format(out["logloss"])
    assert terminal.getvalue().endswith(end)


#: What an out-of-range rate is told, before the value given.
OUT_OF_RANGE = "--negative-rate: the negative rate must be from 0.0001 to 1, got"
NOT_WITH = "--negative-rate below 1 cannot be combined with"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--negative-rate", "0"], f"{OUT_OF_RANGE} 0.0"),
        (["--negative-rate", "-0.5"], f"{OUT_OF_RANGE} -0.5"),
        (["--negative-rate", "1.5"], f"{OUT_OF_RANGE} 1.5"),
        (["--negative-rate", "nan"], f"{OUT_OF_RANGE} nan"),
        (["--negative-rate", "inf"], f"{OUT_OF_RANGE} inf"),
        (["--negative-rate", "0.00001"], f"{OUT_OF_RANGE} 1e-05"),
        (["--negative-rate", "0.5", "--sweep", "alpha=0.1,0.2"], f"{NOT_WITH} --sweep"),
    ],
)
def test_a_bad_rate_is_a_usage_error(
    criteo: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert run(criteo, "--limit", 100, *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"online-ctr replay: error: {message}\n"


def test_a_sampled_replay_calibrates_with_the_weights(
    criteo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The calibration's histogram counts each kept example its weight, as the worker's
    does: the calibrated log loss is weighted, and the same as the in-process calibrator's."""
    flags = (
        "--limit",
        2000,
        "--negative-rate",
        "0.3",
        "--calibration",
        "power",
        "--batch-size",
        512,
    )
    assert run(criteo, *flags) == 0
    out = last_json(capsys)
    rule = get_rule("ftrl")
    model = InMemoryModel(rule, rule.params(), calibration="power")
    hasher = FeatureHasher(numeric="log_bucket")
    rows = list(read_examples(criteo, "criteo", limit=2000))
    for start in range(0, len(rows), 512):
        chunk = rows[start : start + 512]
        model.learn(keep_negatives(hasher.batch([x for x, _ in chunk], [y for _, y in chunk]), 0.3))
    assert model.calibration is not None
    assert model.calibration.metrics.weight > model.calibration.metrics.count
    calibrated = out["calibrated"]["logloss"]
    assert calibrated == pytest.approx(model.calibration.metrics.logloss, rel=1e-12)


def test_a_rate_that_is_not_a_number_is_refused_by_argparse(criteo: Path) -> None:
    with pytest.raises(SystemExit) as exit_status:
        run(criteo, "--negative-rate", "a tenth")
    assert exit_status.value.code == 2
