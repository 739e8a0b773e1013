"""``online-ctr replay``: its JSON, its flags and its errors, on the Criteo head."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from online_ctr.cli import replay as replay_command
from online_ctr.cli.replay import TIMED, register
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule
from tests.conftest import fresh_python

REQUIRED = {
    "rule", "params", "examples", "logloss", "auc", "calibration", "nonzero_weights",
    "features_tracked", "examples_per_second", "batch_size", "timed",
}  # fmt: skip


@pytest.fixture
def criteo(data_dir: Path) -> Path:
    return data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"


#: Keys of the replay's output that are timings.
SPEED = {"seconds", "examples_per_second"}


def run(*argv: str | Path | int) -> int:
    """The sub-command as the ``online-ctr`` dispatcher runs it."""
    parser = argparse.ArgumentParser(prog="online-ctr")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["replay", *map(str, argv)])
    status: int = args.func(args)
    return status


def last_json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    lines = capsys.readouterr().out.splitlines()

    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    parsed: dict[str, Any] = json.loads(lines[-1], parse_constant=refuse)
    return parsed


@pytest.mark.parametrize("batch_size", [1, 64])
def test_json_reports_what_the_replay_function_computes(
    criteo: Path, capsys: pytest.CaptureFixture[str], batch_size: int
) -> None:
    status = run(criteo, "--format", "criteo", "--rule", "ftrl", "--alpha", "0.05",
                 "--batch-size", batch_size, "--limit", 1500)  # fmt: skip
    assert status == 0
    out = last_json(capsys)
    assert out.keys() >= REQUIRED
    rule = get_rule("ftrl")
    model = InMemoryModel(rule, rule.params(alpha=0.05))
    direct = replay(read_examples(criteo, "criteo", 1500), model, FeatureHasher(), batch_size)
    assert out["params"] == {"alpha": 0.05, "beta": 1.0, "l1": 1.0, "l2": 1.0}
    assert (out["rule"], out["batch_size"], out["examples"]) == ("ftrl", batch_size, 1500)
    for key in ("logloss", "auc", "calibration", "nonzero_weights", "features_tracked"):
        assert out[key] == getattr(direct, key), key
    assert out["nonzero_weights"] == model.nonzero_weights() > 0
    assert out["examples_per_second"] > 0
    assert out["timed"] == TIMED


def test_batch_size_changes_the_results_only_with_minibatch(
    criteo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    flag_sets: list[list[str | int]] = [
        [],
        ["--batch-size", 64],
        ["--batch-size", 64, "--minibatch"],
    ]
    for flags in flag_sets:
        assert run(criteo, "--format", "criteo", "--rule", "fobos", "--limit", 1500, *flags) == 0
        outputs.append(last_json(capsys))
    one, sixty_four, minibatch = outputs
    same = ("auc", "nonzero_weights", "features_tracked")
    assert [one[key] for key in same] == [sixty_four[key] for key in same]
    # The predictions are identical (test_sequential); the metrics add them up batch by
    # batch, so their sums round differently in the last bits.
    for key in ("logloss", "calibration"):
        assert one[key] == pytest.approx(sixty_four[key], rel=1e-13), key
    assert [out["minibatch"] for out in outputs] == [False, False, True]
    rule = get_rule("fobos")
    model = InMemoryModel(rule, rule.params(), minibatch=True)
    direct = replay(read_examples(criteo, "criteo", 1500), model, FeatureHasher(), 64)
    for key in (*same, "logloss", "calibration"):
        assert minibatch[key] == getattr(direct, key), key
    assert abs(minibatch["logloss"] - one["logloss"]) > 1e-4


def test_passes_replay_the_file_again(criteo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(criteo, "--format", "criteo", "--rule", "rda", "--limit", 300) == 0
    once = last_json(capsys)
    assert run(criteo, "--format", "criteo", "--rule", "rda", "--limit", 300, "--passes", 3) == 0
    thrice = last_json(capsys)
    assert (once["examples"], thrice["examples"]) == (300, 900)
    assert thrice["features_tracked"] == once["features_tracked"]
    assert thrice["logloss"] < once["logloss"]  # the later passes have seen every example


def test_hash_bits_bound_the_features(criteo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(criteo, "--format", "criteo", "--rule", "ftrl", "--limit", 500,
               "--hash-bits", 8) == 0  # fmt: skip
    out = last_json(capsys)
    assert 200 < out["features_tracked"] <= 256
    assert out["hash_bits"] == 8


def test_infinite_params_are_written_as_strings(
    criteo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(criteo, "--format", "criteo", "--rule", "tg", "--k", 10, "--limit", 50) == 0
    params = last_json(capsys)["params"]
    assert params["theta"] == "inf"
    assert params["k"] == 10


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--gamma", "1"],
            "--gamma is not a hyper-parameter of ftrl (it takes alpha, beta, l1, l2)",
        ),
        (
            ["--theta", "1", "--k", "3"],
            "--theta, --k are not hyper-parameters of ftrl (it takes alpha, beta, l1, l2)",
        ),
        (["--alpha", "-1"], "alpha must be > 0, got -1.0"),
    ],
)
def test_bad_hyper_parameters_are_usage_errors(
    criteo: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert run(criteo, "--format", "criteo", "--rule", "ftrl", *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"online-ctr replay: error: {message}\n"


def test_broken_and_missing_files_fail_with_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.fm"
    broken.write_text("1 3:1\n0 3:x\n")
    assert run(broken, "--format", "libfm", "--rule", "ftrl") == 1
    assert capsys.readouterr().err == (
        f"online-ctr replay: error: {broken}, line 2: value 'x' is not a number\n"
    )
    assert run(tmp_path / "absent.fm", "--format", "libfm", "--rule", "ftrl") == 1
    assert "absent.fm" in capsys.readouterr().err


def test_flags_refused_by_argparse(criteo: Path) -> None:
    with pytest.raises(SystemExit) as exit_batch:
        run(criteo, "--format", "criteo", "--rule", "ftrl", "--batch-size", 0)
    with pytest.raises(SystemExit) as exit_format:
        run(criteo, "--format", "svm", "--rule", "ftrl")
    assert exit_batch.value.code == exit_format.value.code == 2


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(
    criteo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(criteo, "--format", "criteo", "--rule", "ftrl", "--limit", 100) == 0
    assert capsys.readouterr().err == ""
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert run(criteo, "--format", "criteo", "--rule", "ftrl", "--limit", 100) == 0
    shown = terminal.getvalue()
    assert shown.startswith("\r[")
    assert shown.endswith("] 100% 100/100 log loss {:.4f}\n".format(last_json(capsys)["logloss"]))


def test_the_default_chunk_is_large_and_changes_nothing(
    criteo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    for flags in ([], ["--batch-size", 1], ["--minibatch"]):
        assert run(criteo, "--rule", "ftrl", "--limit", 400, *flags) == 0
        outputs.append(last_json(capsys))
    default, one, minibatch = outputs
    large = 65_536 if replay_command.available() else 16_384  # read a column at a time or not
    assert (default["batch_size"], one["batch_size"], minibatch["batch_size"]) == (large, 1, 1)
    assert default["nonzero_weights"] == one["nonzero_weights"]
    assert default["logloss"] == pytest.approx(one["logloss"], rel=1e-13)
    # A summed-gradient mini-batch of one example is the sequential learner itself.
    assert minibatch["logloss"] == pytest.approx(one["logloss"], rel=1e-13)


@pytest.mark.parametrize(
    ("flags", "whole_blocks", "expected"),
    [
        ([], False, 16_384),
        ([], True, 65_536),
        (["--calibration", "power"], True, 16_384),  # refitted per chunk: the size matters
        (["--minibatch"], True, 1),
        (["--batch-size", "500"], True, 500),
    ],
)
def test_the_column_reader_learns_its_blocks_whole_where_the_size_changes_nothing(
    flags: list[str], whole_blocks: bool, expected: int
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["replay", "file.tsv", *flags])
    assert replay_command.batch_size(args, whole_blocks) == expected


@pytest.mark.parametrize("flags", [[], ["--passes", 2, "--batch-size", 3000, "--hash-bits", 16]])
def test_either_reader_gives_the_same_replay(
    criteo: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str | int],
) -> None:
    pytest.importorskip("pyarrow")
    outputs = []
    for columns in (True, False):
        monkeypatch.setattr(replay_command, "available", lambda columns=columns: columns)
        assert run(criteo, "--limit", 7000, *flags) == 0
        outputs.append(last_json(capsys))
    by_columns, by_rows = ({k: v for k, v in o.items() if k not in SPEED} for o in outputs)
    # By default the column reader learns its blocks whole (test_the_column_reader_...).
    if not flags:
        assert (by_columns.pop("batch_size"), by_rows.pop("batch_size")) == (65_536, 16_384)
    # The column reader cuts its blocks into batches rather than copying them into batches of
    # exactly --batch-size: the same learning (state and predictions to the last bit: AUC and
    # counts), but the sums of losses and of predictions are added batch by batch, so they may
    # differ in the last bits (1e-12 relative: what issue 8 allows between batch sizes).
    sums = ("logloss", "calibration", "recent_calibration")
    assert {k: v for k, v in by_columns.items() if k not in sums} == {
        k: v for k, v in by_rows.items() if k not in sums
    }
    for name in sums:
        assert by_columns[name] == pytest.approx(by_rows[name], rel=1e-12, abs=0)


def test_the_compact_encoding_is_what_the_service_would_store(
    criteo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(criteo, "--format", "criteo", "--limit", 1500, "--encoding", "compact") == 0
    compact = last_json(capsys)
    assert run(criteo, "--format", "criteo", "--limit", 1500) == 0
    exact = last_json(capsys)
    assert (compact["encoding"], exact["encoding"]) == ("compact", "float64")
    rule = get_rule("ftrl")
    model = InMemoryModel(rule, rule.params(), encoding="compact")
    direct = replay(read_examples(criteo, "criteo", 1500), model, FeatureHasher(), 16_384)
    for key in ("logloss", "auc", "nonzero_weights", "features_tracked"):
        assert compact[key] == getattr(direct, key), key
    assert compact["logloss"] != exact["logloss"]
    assert compact["logloss"] == pytest.approx(exact["logloss"], rel=1e-4)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rule", "rda"], "the compact state encoding supports the rules ftrl and l1sgd, not"),
        (["--minibatch"], "the compact encoding rounds every update: use it without minibatch"),
    ],
)
def test_the_compact_encoding_refuses_what_it_cannot_do(
    criteo: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert run(criteo, "--encoding", "compact", *flags) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"online-ctr replay: error: {message}")
    assert captured.err.count("\n") == 1


def test_a_replay_sets_its_environment_unless_told_otherwise() -> None:
    """numpy's OpenBLAS threads spin at its import for work a replay never gives them."""
    code = (
        "import os\n"
        "os.environ.pop('OPENBLAS_NUM_THREADS', None)\n"
        "from online_ctr.cli.main import replay_environment\n"
        "replay_environment('models')\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
        "replay_environment('replay')\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), os.environ['MIMALLOC_PURGE_DELAY'])\n"
        "os.environ['OPENBLAS_NUM_THREADS'] = '2'\n"
        "replay_environment('replay')\n"
        "print(os.environ['OPENBLAS_NUM_THREADS'])\n"
        "del os.environ['OPENBLAS_NUM_THREADS']\n"
        "import numpy\n"
        "replay_environment('replay')\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    assert fresh_python(code).split() == ["None", "1", "-1", "2", "None"]
