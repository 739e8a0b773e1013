"""``online-ctr replay --crosses`` learns what the in-process model learns on the hasher's
crossed batches, and ``--sweep crosses=...`` makes crosses a dimension of the offline group:
each configuration learns as its own replay, and the group can promote one that crosses."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from online_ctr.learning.crosses import parse_crosses
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule
from tests.core.test_replay_sweep import run

CROSSES = "C1&C2,C14&C17"


def criteo(data_dir: Path) -> Path:
    return data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"


def replayed(capsys: pytest.CaptureFixture[str], *argv: str | Path | int) -> dict[str, Any]:
    assert run(*argv) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out.splitlines()[-1])
    return out


def test_replay_learns_the_crossed_batches(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = replayed(
        capsys, criteo(data_dir), "--crosses", CROSSES, "--limit", 2000, "--batch-size", 500
    )
    rows = list(itertools.islice(read_examples(criteo(data_dir), "criteo"), 2000))
    model = InMemoryModel(get_rule("ftrl"))
    hasher = FeatureHasher(numeric="log_bucket", crosses=parse_crosses(CROSSES))
    result = replay(rows, model, hasher, batch_size=500)
    assert out["crosses"] == CROSSES
    assert out["logloss"] == result.logloss
    assert out["features_tracked"] == model.features_tracked()
    plain = replayed(capsys, criteo(data_dir), "--limit", 2000)
    assert plain["crosses"] == "" and plain["features_tracked"] < out["features_tracked"]


@pytest.mark.parametrize(
    ("crosses", "message"),
    [("C1", "is not a cross"), ("C1&C1", "crosses a field with itself")],
)
def test_bad_crosses_are_usage_errors(
    data_dir: Path, capsys: pytest.CaptureFixture[str], crosses: str, message: str
) -> None:
    assert run(criteo(data_dir), "--crosses", crosses) == 2
    err = capsys.readouterr().err
    assert err.startswith("online-ctr replay: error: --crosses: ") and message in err


def test_crosses_are_a_sweep_dimension(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = "crosses=none,C1&C2+C14&C17;l1=1,0.1"
    out = replayed(capsys, criteo(data_dir), "--sweep", grid, "--limit", 3000)
    names = [c["name"] for c in out["configurations"]]
    assert names == [
        "crosses_none-l1_1", "crosses_none-l1_0.1",
        "crosses_C1&C2+C14&C17-l1_1", "crosses_C1&C2+C14&C17-l1_0.1",
    ]  # fmt: skip
    for configuration, crosses in zip(
        out["configurations"], ["", "", CROSSES, CROSSES], strict=True
    ):
        l1 = configuration["params"]["l1"]
        alone = replayed(
            capsys, criteo(data_dir), "--crosses", crosses, "--l1", l1, "--limit", 3000
        )
        assert alone["logloss"] == configuration["logloss"]


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ("crosses=none,none", "crosses' values must be distinct"),
        ("crosses=C1&C1", "crosses a field with itself"),
        ("crosses=C1+C2", "is not a cross"),
    ],
)
def test_a_bad_crosses_grid_is_a_usage_error(
    data_dir: Path, capsys: pytest.CaptureFixture[str], grid: str, message: str
) -> None:
    with pytest.raises(SystemExit) as exit_status:
        run(criteo(data_dir), "--sweep", grid)
    assert exit_status.value.code == 2
    assert message in capsys.readouterr().err


def test_crosses_given_and_swept_are_refused(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(criteo(data_dir), "--crosses", "C1&C2", "--sweep", "crosses=none,C1&C2") == 2
    assert "--crosses is also swept" in capsys.readouterr().err
