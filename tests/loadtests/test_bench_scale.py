"""The scale benchmark: its pieces alone, then its ``--quick`` mode run for real.

No test asserts a timing: the real run checks that every figure is there and finite, and that
the report and its plot were written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest

from loadtests.bench import bench_scale, scale, scale_client, scale_report, sequential
from loadtests.common import stats
from loadtests.common.processes import Stack

# loadtests/ is not an installed package; pytest's `pythonpath = ["."]` would make this moot.
from testkit.paths import DATA_DIR


@pytest.mark.parametrize(
    ("text", "sizes"),
    [("100k,1M,10M", (100_000, 1_000_000, 10_000_000)), ("2k, 20_000,2k", (2_000, 20_000))],
)
def test_sizes_take_suffixes_and_sort(text: str, sizes: tuple[int, ...]) -> None:
    assert bench_scale.sizes(text) == sizes


@pytest.mark.parametrize("text", ["1M", "1M,1000k", "big,1M", "0,1M"])
def test_sizes_refuses_fewer_than_two_or_nonsense(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        bench_scale.sizes(text)


def test_quick_defaults_are_tiny_and_flags_win() -> None:
    quick = bench_scale.parse_args(["--quick"])
    assert quick.sizes == bench_scale.QUICK_SIZES and quick.examples <= 10_000
    full = bench_scale.parse_args(["--sizes", "1k,2k", "--examples", "7"])
    assert full.sizes == (1_000, 2_000) and full.examples == 7 and full.duration_s == 10.0


def test_unique_features_never_repeat_a_feature() -> None:
    factory = scale_client.UniqueFeatures(per_example=4, seed=3)
    seen = set()
    for body in (factory.body(5), factory.body(7)):
        for example in json.loads(body)["examples"]:
            assert example["label"] in (0, 1)
            seen.update(example["features"].items())
    assert len(seen) == 12 * 4


def test_learn_bodies_hold_every_row_in_full_bodies() -> None:
    rows: list[scale_client.Row] = [({"a": str(i)}, i % 2) for i in range(2500)]
    bodies = [json.loads(b)["examples"] for b in scale_client.learn_bodies(rows)]
    assert [len(b) for b in bodies] == [1000, 1000, 1000]
    assert [e["features"]["a"] for e in bodies[2][-2:]] == ["498", "499"]  # cycled


def test_predict_bodies_single_and_batch(tmp_path: Path) -> None:
    rows: list[scale_client.Row] = [({"a": str(i), "n": 1.5}, 0) for i in range(3)]
    single = scale_client.predict_bodies(tmp_path / "s", rows, 1).read_text().splitlines()
    assert [json.loads(line) for line in single][1] == {"features": {"a": "1", "n": 1.5}}
    batch = scale_client.predict_bodies(tmp_path / "b", rows, 2).read_text().splitlines()
    assert [len(json.loads(line)["examples"]) for line in batch] == [2, 2]


def test_ratios_judge_throughput_and_latency_targets() -> None:
    small = scale.SizeResult(1, 1, 1.0, 1, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    large = dataclasses.replace(small, target=2, tracked=2, drain_examples_per_s=0.5)
    verdicts = {r.name: r.met for r in scale_report.ratios(small, large)}
    assert verdicts["worker-only drain, examples/s"] is False
    assert verdicts["single /predict p99, ms"] is True
    assert verdicts["Redis bytes per tracked feature"] is None  # shown, no target
    assert scale_report.Ratio("x", 0.0, 1.0, ">= 0.8").met is None


def test_parse_vm_rss_refuses_a_status_without_it() -> None:
    with pytest.raises(ValueError, match="VmRSS"):
        stats.parse_vm_rss("Name:\tkthreadd\n")


def numbers(line: str) -> list[float]:
    """The cells of a Markdown table line as numbers (``n/a`` and text raise)."""
    return [float(cell.strip().replace(",", "")) for cell in line.strip().strip("|").split("|")]


@pytest.mark.parametrize("tool", ["wrk", "httpx"])
def test_each_timing_tool_times_single_and_batch_predictions_of_a_real_api(
    tool: str, tmp_path: Path
) -> None:
    # The one step of the benchmark that depends on the tool, against the real API; the rest
    # of the run is the same whichever tool times it (the quick run below, with the one here).
    if tool == "wrk" and shutil.which("wrk") is None:
        pytest.skip("apt-get install -y wrk")
    bodies = scale.write_bodies(
        tmp_path, scale_client.criteo_rows(DATA_DIR, limit=scale_client.BODY_EXAMPLES)
    )
    with Stack(tmp_path / "stack") as stack:
        url = stack.start_api() + "/predict"
        single = sequential.timed(tool, url, bodies.single, 0.3)
        batch = sequential.timed(tool, url, bodies.batch, 0.3)
    for timing in (single, batch):
        assert 0 < timing.p50_ms <= timing.p99_ms and timing.requests_per_s > 0


def test_quick_run_reports_every_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One whole run, timed by the tool the benchmark picks here (wrk when installed): the
    # test above covers the other tool's step.
    tool = sequential.timing_tool()
    out = tmp_path / "report" / "scale.md"
    argv = ["--quick", "--duration-s", "0.5", "--out", str(out), "--data-dir", str(DATA_DIR)]
    assert bench_scale.main([*argv, "--rounds", "2"]) == 0  # two fill windows, and so on
    printed = capsys.readouterr().out
    header = "| " + " | ".join(scale_report.HEADER) + " |"
    lines = printed.splitlines()
    rows = lines[lines.index(header) + 2 :][: len(bench_scale.QUICK_SIZES)]
    for size, line in zip(bench_scale.QUICK_SIZES, rows, strict=True):
        cells = numbers(line)
        assert len(cells) == len(scale_report.HEADER) and all(map(math.isfinite, cells))
        assert cells[0] == size and cells[1] >= size  # target, then features tracked
    small, large = bench_scale.QUICK_SIZES
    beside = next(line for line in lines if line.startswith(f"| {small:,} beside {large:,} |"))
    assert all(map(math.isfinite, numbers(beside.split("|", 2)[2])))  # every figure but its label
    for name, *_ in scale_report.TARGETS.values():  # each target judged, whichever way
        verdicts = [line.rsplit("|", 2)[1] for line in lines if line.startswith(f"| {name} |")]
        assert verdicts and verdicts[0] in (" met ", " NOT met ")
    report = out.read_text()
    assert all(line in report for line in [header, *rows, beside])
    assert "![Cost against model size](img/scale.png)" in report
    assert f"`{tool}`" in report or f"({tool})" in report
    fill_runs = [line for line in report.splitlines() if "| fill, features/s |" in line]
    # The judged ratio and the one against the first row, then each size's runs and the
    # smallest size's beside the larger: two windows each, the reference's each from its start.
    assert len(fill_runs) == 2 + len(bench_scale.QUICK_SIZES) + 1
    assert all(len(line.split("|")[3].split(", ")) == 2 for line in fill_runs[2:])
    first = scale_report.ROUNDS["learned_first_examples_per_s"]
    warm_ups = [line.split("|")[3] for line in report.splitlines() if f"| {first} |" in line]
    assert len(warm_ups) == len(bench_scale.QUICK_SIZES) + 1  # each size, and the beside row
    assert all(numbers(runs)[0] > 0 for runs in warm_ups)  # one run each, a rate
    image = out.parent / "img" / "scale.png"
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and image.stat().st_size > 10_000


def test_a_new_report_keeps_the_sections_other_commands_wrote() -> None:
    previous = (
        "# Benchmark\n\nold\n\n## Figures at each size\n\n| a |\n\n"
        "## Compact state encoding\n\n| compact | table |\n\nCommand: `x`.\n"
    )
    kept = scale_report.kept_sections(previous)
    assert kept == "## Compact state encoding\n\n| compact | table |\n\nCommand: `x`."
    assert scale_report.kept_sections("# Benchmark\n\n## Method\n\ntext\n") == ""
    spread = "## Spread across runs\n\n| run |\n"
    assert scale_report.kept_sections(previous + spread).endswith(
        "Command: `x`.\n## Spread across runs\n\n| run |"
    )


def test_rounds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    # A median of no runs would end the benchmark in a traceback after its fill.
    with pytest.raises(SystemExit):
        bench_scale.parse_args(["--rounds", "0"])
    assert "argument --rounds" in capsys.readouterr().err
    assert bench_scale.parse_args(["--rounds", "5"]).rounds == 5
