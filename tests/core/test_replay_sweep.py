"""``online-ctr replay --sweep``: a group that promotes its own challengers, replayed on the
shared data, and the command line's refusals.

The grid is the issue's, ordered so that the default FTRL (alpha 0.1, l1 1) is listed first and
so serves first, as a service's group is served by its first model; the policy is the default.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from online_ctr.cli.replay import register
from online_ctr.cli.replay_sweep import MEAN_BASELINE

#: alpha=0.01,0.02,0.05,0.1 and l1=0.1,1,3 with the default's values first.
GRID = "alpha=0.1,0.01,0.02,0.05;l1=1,0.1,3"
DEFAULT = {"alpha": 0.1, "beta": 1.0, "l1": 1.0, "l2": 1.0}


def run(*argv: str | Path | int) -> int:
    """The sub-command as the ``online-ctr`` dispatcher runs it."""
    parser = argparse.ArgumentParser(prog="online-ctr")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *map(str, argv)])
    status: int = args.func(args)
    return status


def swept(path: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    """The JSON of a sweep of :data:`GRID` on ``path``: stdout's one line."""
    assert run(path, "--sweep", GRID, *flags) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1
    assert captured.err.startswith("online-ctr replay: ")
    result: dict[str, Any] = json.loads(captured.out)
    return result


def test_on_ipinyou_the_default_beats_the_mean_from_the_start(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With its base-rate prior the default FTRL beats predicting the running mean over the
    whole stream, and the group serving it ends within 1% of the best configuration in
    hindsight (issue 50)."""
    out = swept(data_dir / "ipinyou" / "ipinyou_train.fm.txt", capsys)
    first, mean = out["configurations"][0], out["mean_baseline"]
    assert (first["name"], first["params"]) == ("alpha_0.1-l1_1", DEFAULT)
    assert first["logloss"] < mean["logloss"]
    assert out["served_logloss"] <= 1.01 * out["best"]["logloss"]
    assert out["served_logloss"] < mean["logloss"]


def test_without_the_prior_the_group_ends_serving_one_that_beats_the_mean(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the base-rate prior, the default FTRL, serving first, is worse than predicting
    the running mean; the group promotes a challenger that, on the examples it served, is
    better than the mean. (No configuration of this grid beats the running mean over the
    whole stream without the prior: their first examples cost more than the mean's.)"""
    path = data_dir / "ipinyou" / "ipinyou_train.fm.txt"
    out = swept(path, capsys, "--base-rate", "off")
    first, mean = out["configurations"][0], out["mean_baseline"]
    assert (first["name"], first["params"]) == ("alpha_0.1-l1_1", DEFAULT)
    assert first["logloss"] > mean["logloss"]
    assert mean["predicts"] == MEAN_BASELINE
    timeline = out["timeline"]
    assert timeline[0]["name"] == first["name"] and len(timeline) >= 2
    last = timeline[-1]
    assert out["serving"] == last["name"] != first["name"]
    assert last["logloss"] < last["mean_logloss"]
    assert out["served_logloss"] < first["logloss"]
    assert sum(entry["examples"] for entry in timeline) == out["examples"] == 26_773


@pytest.mark.parametrize(
    "path", ["criteo/criteo_kaggle_train_head10k.tsv", "avazu/avazu_train_head10k.csv"]
)
def test_the_group_serves_within_one_percent_of_the_best_in_hindsight(
    data_dir: Path, capsys: pytest.CaptureFixture[str], path: str
) -> None:
    out = swept(data_dir / path, capsys)
    assert out["served_logloss"] <= 1.01 * out["best"]["logloss"]
    assert out["best"]["logloss"] == min(c["logloss"] for c in out["configurations"])
    assert out["served_logloss"] < out["mean_baseline"]["logloss"]


def test_each_configuration_learns_as_its_own_replay(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    criteo = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    assert run(criteo, "--sweep", "l1=1,0.1", "--alpha", "0.05", "--limit", 3000) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["params"]["alpha"] for c in out["configurations"]] == [0.05, 0.05]
    for configuration in out["configurations"]:
        assert (
            run(criteo, "--alpha", "0.05", "--l1", configuration["params"]["l1"], "--limit", 3000)
            == 0
        )
        assert json.loads(capsys.readouterr().out)["logloss"] == configuration["logloss"]
    assert out["policy"] == {
        "margin": 0.001, "confidence": 0.95, "min_examples": 1000, "planned_units": 10_000,
        "alpha_each": pytest.approx(0.05),
    }  # fmt: skip


def test_the_policy_options_are_the_policy(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    criteo = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    flags = ["--promote-margin", "0", "--promote-confidence", "0.9"]
    flags += ["--promote-min-examples", "50", "--promote-planned-units", "500"]
    assert run(criteo, "--sweep", "alpha=0.01,0.1", "--limit", 2000, *flags) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["policy"] == {
        "margin": 0.0, "confidence": 0.9, "min_examples": 50, "planned_units": 500,
        "alpha_each": pytest.approx(0.1),
    }  # fmt: skip
    assert out["timeline"][1]["name"] == "alpha_0.1"
    assert out["timeline"][1]["paired_examples"] >= 50


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ("alpha=1,2,3,4,5,6,7,8;l1=1,2,3,4,5,6,7,8,9", "the grid has 72 configurations; a sweep"),
        ("alpha", "'alpha' is not NAME=V1,V2,..."),
        ("alpha=0.1;", "'' is not NAME=V1,V2,..."),
        ("alpha=0.1,x", "alpha=0.1,x is not a comma-separated list of float values"),
        ("k=1.5", "k=1.5 is not a comma-separated list of int values"),
        ("eta=0.1", "cannot sweep 'eta': sweep alpha, beta, l1, l2, gamma, theta, k"),
        ("alpha=0.1;alpha=0.2", "alpha is listed twice"),
        ("alpha=0.1,0.1", "alpha's values must be finite and distinct"),
        ("alpha=inf", "alpha's values must be finite and distinct"),
    ],
)
def test_a_bad_grid_is_a_usage_error_naming_the_option(
    data_dir: Path, capsys: pytest.CaptureFixture[str], grid: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_status:
        run(data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv", "--sweep", grid)
    assert exit_status.value.code == 2
    assert f"error: argument --sweep: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rule", "rda", "--sweep", "alpha=0.1"], "--alpha is not a hyper-parameter of rda"),
        (["--sweep", "alpha=0.1,-1"], "alpha must be > 0, got -1.0"),
        (["--alpha", "0.1", "--sweep", "alpha=0.2"], "--alpha is also swept"),
        (["--promote-margin", "0.01"], "the --promote-* options need --sweep"),
        (["--sweep", "alpha=0.1", "--calibration", "power"], "drop --calibration"),
    ],
)
def test_options_that_do_not_fit_are_usage_errors(
    data_dir: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert run(data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv", *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("online-ctr replay: error: --sweep: ")
    assert message in captured.err


@pytest.mark.parametrize(
    "flags",
    [["--promote-margin", "1"], ["--promote-confidence", "0.2"], ["--promote-min-examples", "0"]],
)
def test_policy_values_out_of_range_are_refused_by_argparse(
    data_dir: Path, flags: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_status:
        run(data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv", "--sweep", "l1=1", *flags)
    assert exit_status.value.code == 2
