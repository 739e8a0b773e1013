"""``replay`` and ``train-batch`` without ceremony: FTRL by default, the format told from the
file, a refusal for files that are no click log, a warning for a model with no weight left, and
a training loss labelled as such next to a held-out one."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from online_ctr.cli import replay, train_batch
from online_ctr.learning.detect import FormatError, detect_first_line, detect_format

FILES = {
    "criteo/criteo_kaggle_train_head10k.tsv": "criteo",
    "criteo/criteo_deepctr_sample200.csv": "criteo",
    "avazu/avazu_train_head10k.csv": "avazu",
    "ipinyou/ipinyou_train.fm.txt": "libfm",
    "obd/obd_random_men.csv": "obd",
    "obd/obd_random_women.csv": "obd",
}
ITEM_TABLES = [f"obd/obd_random_{who}_item_context.csv" for who in ("men", "women")]


def run(command: str, *argv: str | Path | float) -> int:
    """The sub-command as the ``online-ctr`` dispatcher runs it."""
    parser = argparse.ArgumentParser(prog="online-ctr")
    subparsers = parser.add_subparsers(dest="command", required=True)
    replay.register(subparsers)
    train_batch.register(subparsers)
    args = parser.parse_args([command, *map(str, argv)])
    status: int = args.func(args)
    return status


def last_json(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    captured = capsys.readouterr()
    parsed: dict[str, Any] = json.loads(captured.out.splitlines()[-1])
    return parsed, captured.err


@pytest.mark.parametrize(("name", "fmt"), FILES.items())
def test_the_shared_files_are_detected(data_dir: Path, name: str, fmt: str) -> None:
    assert detect_format(data_dir / name) == fmt


@pytest.mark.parametrize(
    "name",
    [
        "criteo/criteo_deepctr_sample200.csv",
        "ipinyou/ipinyou_train.fm.txt",
        "obd/obd_random_men.csv",
    ],
)
def test_replay_needs_neither_rule_nor_format(
    data_dir: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert run("replay", data_dir / name, "--limit", 200) == 0
    out, _ = last_json(capsys)
    assert (out["rule"], out["format"], out["examples"]) == ("ftrl", FILES[name], 200)


@pytest.mark.parametrize("name", ITEM_TABLES)
def test_open_bandit_item_tables_are_refused(
    data_dir: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    assert run("replay", data_dir / name) == 1
    err = capsys.readouterr().err
    assert err.startswith("online-ctr replay: error: ") and len(err.splitlines()) == 1
    assert "Open Bandit Dataset item table" in err and "not a click log" in err
    assert run("replay", data_dir / name, "--format", "obd") == 1
    assert "line 1: an Open Bandit Dataset header needs click" in capsys.readouterr().err


def test_open_bandit_logs_are_not_read_as_avazu(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("replay", data_dir / "obd/obd_random_men.csv", "--format", "avazu") == 1
    assert "line 1: an Open Bandit Dataset CSV" in capsys.readouterr().err


@pytest.mark.parametrize(
    "first", ["", "hello world", "a,b,c", "2 3:1", "0\t1\t2", "label,I1,I2", "click,id,hour"]
)
def test_lines_of_no_known_format_are_refused(first: str) -> None:
    with pytest.raises(FormatError, match="matches no known format"):
        detect_first_line(first)


def test_an_unknown_file_fails_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("some notes\nmore\n")
    assert run("replay", path) == 1
    assert run("train-batch", path, "--l1", 1) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all("matches no known format" in line for line in lines)
    assert lines[0].startswith(f"online-ctr replay: error: {path}: the first line")


def test_a_model_with_no_weight_left_is_warned_about(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    criteo = data_dir / "criteo/criteo_deepctr_sample200.csv"
    assert run("replay", criteo, "--rule", "rda", "--l1", 1) == 0
    out, err = last_json(capsys)
    assert out["nonzero_weights"] == 0
    assert err == (
        "online-ctr replay: warning: the run ended with zero nonzero weights: the model "
        "predicts a constant. l1=1.0 is likely too strong for rda on this data; "
        "try a smaller --l1\n"
    )
    assert run("replay", criteo, "--rule", "truncation", "--theta", 1e9) == 0
    assert "theta=1000000000.0 is likely too strong for truncation" in last_json(capsys)[1]
    assert run("replay", criteo) == 0
    assert last_json(capsys)[1] == ""


def test_train_batch_reports_training_and_heldout_loss(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    avazu = data_dir / "avazu/avazu_train_head10k.csv"
    assert run("train-batch", avazu, "--l1", 5, "--limit", 2000) == 0
    whole, _ = last_json(capsys)
    assert whole["heldout_logloss"] is None and whole["heldout_examples"] == 0
    assert "logloss" not in whole and whole["examples"] == 2000
    assert run("train-batch", avazu, "--l1", 5, "--limit", 2000, "--holdout", 0.25) == 0
    held, _ = last_json(capsys)
    assert (held["examples"], held["heldout_examples"], held["holdout"]) == (1500, 500, 0.25)
    assert held["format"] == "avazu"
    # The fit saw the first 1,500 only (a different optimum), and learned something the tail
    # shares: better than a coin flip on it.
    assert held["training_logloss"] != whole["training_logloss"]
    assert 0 < held["heldout_logloss"] < math.log(2)


def test_train_batch_heldout_loss_is_the_mean_log_loss_of_the_tail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Feature 1 always clicks, feature 2 never: the tail has one known and one unseen feature.
    lines = ["1 1:1", "0 2:1"] * 20 + ["1 1:1", "1 3:1"]
    path = tmp_path / "small.fm"
    path.write_text("\n".join(lines) + "\n")
    assert run("train-batch", path, "--l1", 0.5, "--holdout", 2 / 42) == 0
    out, _ = last_json(capsys)
    assert out["heldout_examples"] == 2
    # The unseen feature weighs 0: p = 0.5, a loss of log 2; the known one is confidently right.
    assert math.log(2) / 2 < out["heldout_logloss"] < math.log(2) / 2 + 0.1


def test_a_holdout_outside_zero_one_is_refused(data_dir: Path) -> None:
    with pytest.raises(SystemExit) as refused:
        run("train-batch", data_dir / "ipinyou/ipinyou_train.fm.txt", "--l1", 1, "--holdout", 1)
    assert refused.value.code == 2
