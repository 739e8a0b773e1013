"""The quality_logs section's parts: one click log measured against the command it stands
for, the targets' verdicts, and ``--update`` rewriting one section of a report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import baseline, quality_logs
from loadtests.bench import run as bench
from loadtests.bench.quality_logs_runs import (
    BEST,
    DEFAULT,
    GROUP,
    LOGS,
    MEAN,
    VW,
    VW_FTRL,
    Measured,
    Scored,
    labels,
    measure,
)
from loadtests.common.report import Headline, Section

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = "criteo/criteo_deepctr_sample200.csv"


def test_every_click_log_in_the_data_folder_is_measured(data_dir: Path) -> None:
    logs = {str(path.relative_to(data_dir)) for path in data_dir.rglob("*.*")}
    not_logs = {"README.md", "ipinyou/featindex.fm.txt"}
    not_logs |= {f"obd/obd_random_{who}_item_context.csv" for who in ("men", "women")}
    assert logs - not_logs == set(LOGS.values())


def test_a_log_measured_against_the_replay_command(data_dir: Path) -> None:
    path = data_dir / SAMPLE
    measured = measure("criteo sample200", path, None)
    assert [row.system for row in measured.rows] == [MEAN, DEFAULT, BEST, GROUP, VW_FTRL, VW]
    assert (measured.examples, measured.clicks) == (200, 49)
    y = labels(path, None)
    assert measured.by(MEAN).logloss == pytest.approx(baseline.running_mean_logloss(y), rel=1e-12)
    command = [sys.executable, "-m", "online_ctr.cli.main", "replay", str(path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
    plain = json.loads(done.stdout.splitlines()[-1])
    default = measured.by(DEFAULT)
    assert (default.logloss, default.auc, default.calibration) == (
        plain["logloss"],
        plain["auc"],
        plain["calibration"],
    )
    # 200 examples are fewer than the promotion test's 1,000: the group serves the default.
    group = measured.by(GROUP)
    assert group.logloss == pytest.approx(default.logloss, rel=1e-12)
    assert group.calibration == pytest.approx(default.calibration, rel=1e-12)
    assert "no promotion" in measured.timeline
    # The grid holds the default, so the best in hindsight is no worse.
    assert measured.by(BEST).logloss <= default.logloss


def _measured(default: float, calibration: float, group: float) -> Measured:
    losses = {MEAN: 0.05, DEFAULT: default, BEST: 0.048, GROUP: group, VW_FTRL: 0.049, VW: 0.051}
    rows = tuple(
        Scored(s, "", loss, 0.6, calibration if s == DEFAULT else 1.0, 10)
        for s, loss in losses.items()
    )
    return Measured("log", 100, 5, rows, "")


def test_the_targets_verdicts() -> None:
    good = quality_logs.targets(_measured(0.049, 1.01, 0.0484))
    assert [cell.split(" (")[0] for cell in good] == ["met"] * 5
    bad = quality_logs.targets(_measured(0.052, 1.2, 0.049))
    assert [cell.split(" (")[0] for cell in bad] == ["NOT met"] * 5
    table = quality_logs.log_table(_measured(0.0505, 1.2, 0.049))
    assert "broken: worse than the mean" in table  # the quality section's word, unchanged


def test_update_rewrites_only_the_sections_run(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    out.write_text("# B\n\nopening\n\n## Quality\n\nold\n\n## This run\n\nmachine\n")
    args = bench.parse_args(["--sections", "quality_logs", "--update", "--out", str(out)])
    about = {"command": "`c`", "date": "d", "code": "abc", "duration": "0.1 min"}
    bench.write_report(args, [Section("Quality on every log", "new")], about, tmp_path)
    text = out.read_text()
    assert text.startswith("# B\n\nopening\n\n## Quality\n\nold\n\n## Quality on every log\n\nnew")
    assert "run alone (`c`, d, code `abc`" in text and text.endswith("## This run\n\nmachine\n")
    with pytest.raises(SystemExit, match="lacks"):
        stale = Section("Quality", "x", headlines=(Headline("FTRL log loss", 0.4, ""),))
        bench.write_report(args, [stale], about, tmp_path)
