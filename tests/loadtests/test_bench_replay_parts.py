"""The replay benchmark's pieces: encoding for VW and River, VW's output, statistics, ratios.

Nothing here asserts a timing: runs are faked where the bookkeeping is tested, and the small
real runs at the end check that every system computes the same log loss, not how fast.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import _river, _vw, bench_replay
from loadtests.bench.bench_replay import Measurement, Run
from online_ctr.learning.features import BIAS, FeatureHasher, Value
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules.ftrl import FTRLParams

# loadtests/ is not an installed package; pytest's `pythonpath = ["."]` would make this moot.
from testkit.paths import CRITEO

pytestmark = pytest.mark.processes


#: The end of a real `python -m vowpalwabbit --ftrl ... -d head10k.vw` run (VW 9.11).
VW_OUTPUT = """\
0.471813 0.470369         8192         8192.0        -1.0000        -3.9138       35

finished run
number of examples = 10000
weighted example sum = 10000.000000
weighted label sum = -5636.000000
average loss = 0.470788
best constant = -1.276187
best constant's loss = 0.524620
total feature number = 343179
"""

EXAMPLES: list[dict[str, Value]] = [
    {"site": "news", "C1": "68fd1e64"},
    {"site": "news", "price": 2.5, "zero": 0.0, "count": 3},
    {"tags": ["a", "b", "a"], "site": "blog"},
    {},
]


def test_parse_summary_reads_vw_s_final_block() -> None:
    assert _vw.parse_summary(VW_OUTPUT) == _vw.Summary(examples=10000, average_loss=0.470788)


def test_parse_summary_refuses_output_without_the_summary() -> None:
    with pytest.raises(ValueError, match="average_loss"):
        _vw.parse_summary(VW_OUTPUT.replace("average loss", "mean loss"))


@pytest.mark.parametrize("example", EXAMPLES)
def test_named_features_are_exactly_our_hashed_features(example: dict[str, Value]) -> None:
    hasher = FeatureHasher()
    batch = hasher.batch([example])
    ours = dict(zip(batch.ids.tolist(), batch.values.tolist(), strict=True))
    named = {hasher.id(name): x for name, x in _vw.named_features(example).items()}
    assert ours == {hasher.id(BIAS): 1.0, **named}


@pytest.mark.parametrize("example", EXAMPLES)
def test_river_features_are_the_named_features_plus_the_bias(example: dict[str, Value]) -> None:
    expected = {**_vw.named_features(example), BIAS: 1.0}
    assert _river.features(example) == expected


def test_text_lines_by_name_hold_exactly_the_named_features() -> None:
    encoder = _vw.TextEncoder()
    for example, label in read_examples(CRITEO, "criteo", limit=200):
        named = _vw.named_features(example)
        assert set(named.values()) == {1.0}
        assert encoder.line(example, label) == _vw.LABEL_PREFIX[label] + " ".join(named)
    assert encoder.line(EXAMPLES[0], 1) == "1 | site=news C1=68fd1e64"
    assert encoder.line(EXAMPLES[1], 0) == "-1 | site=news price:2.5 count:3.0"
    assert encoder.line(EXAMPLES[2], 0) == "-1 | tags=a:2.0 tags=b site=blog"
    assert encoder.line({}, 1) == "1 | "


@pytest.mark.parametrize("value", ["a b", "a:b", "a|b", "a\tb"])
def test_text_lines_by_name_refuse_what_vw_would_misread(value: str) -> None:
    with pytest.raises(ValueError, match="reserves"):
        _vw.TextEncoder().line({"site": value}, 1)


def test_text_lines_by_index_number_each_name_once() -> None:
    encoder = _vw.TextEncoder(by_index=True)
    lines = [encoder.line({"site": value, "x": 0.5}, 1) for value in ("a b", "c", "a b")]
    assert lines == ["1 | 1 2:0.5", "1 | 3 2:0.5", "1 | 1 2:0.5"]
    assert encoder.index == {"site=a b": 1, "x": 2, "site=c": 3}


def test_vw_parses_our_lines_into_our_features() -> None:
    vw = _vw.workspace(["--quiet", "--bit_precision=24"])
    example = vw.parse(_vw.TextEncoder(by_index=True).line(EXAMPLES[1], 1))
    features = sorted(example.iter_features())
    label = example.get_simplelabel_label()
    vw.finish_example(example)
    vw.finish()
    assert features == [(1, 1.0), (2, 2.5), (3, 3.0), (_vw.CONSTANT_INDEX, 1.0)]
    assert label == 1.0


def test_ftrl_arguments_pass_the_hyper_parameters_unrounded() -> None:
    arguments = _vw.ftrl_arguments(0.1, 1.0, 1 / 3, 0.0, bits=24)
    assert "--l1=0.3333333333333333" in arguments
    assert "--loss_function=logistic" in arguments
    assert not {"--noconstant", "--link=logistic", "--sparse_weights"} & set(arguments)
    assert "--sparse_weights" in _vw.ftrl_arguments(0.1, 1.0, 0.0, 0.0, bits=32)
    assert "--quiet" not in _vw.ftrl_arguments(0.1, 1.0, 0.0, 0.0, quiet=False)


def test_colliding_names_counts_every_name_that_shares_an_index() -> None:
    assert _vw.colliding_names(list("abcde"), bits=2) >= 2  # 5 names, 4 indexes
    assert _vw.colliding_names(["site=news", "site=blog"], bits=32) == 0


def test_replicate_repeats_in_order_and_cuts() -> None:
    assert bench_replay.replicate([1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    assert bench_replay.replicate([1, 2, 3], 2) == [1, 2]


def test_measurement_statistics() -> None:
    m = Measurement(
        "vw", "pyvw-text", "ftrl", 1, 1000, seconds=(4.0, 1.0, 2.0), cpu_seconds=(5.0, 4.0, 8.0)
    )
    assert m.examples_per_second == 500.0  # the median run
    assert m.examples_per_cpu_second == 200.0
    report = json.loads(json.dumps(m.as_dict(), allow_nan=False))
    assert report["seconds"] == [4.0, 1.0, 2.0]
    assert (report["examples_per_second"], report["log_loss"]) == (500.0, None)


def test_stopwatch_counts_the_cpu_time_of_finished_children() -> None:
    watch = bench_replay.Stopwatch()
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass"
    subprocess.run([sys.executable, "-c", busy], check=True)
    run = watch.stop(0.5)
    assert run.cpu_seconds >= 0.2
    assert run.seconds >= 0.2
    assert run.log_loss == 0.5


def _job(name: str, cpu_seconds: list[float], calls: list[str]) -> bench_replay.Job:
    times = iter(cpu_seconds)

    def run() -> Run:
        calls.append(name)
        return Run(100.0, next(times), 0.25)  # a loaded machine: wall time says nothing

    def warm_up() -> Run:
        calls.append(f"warm {name}")
        return Run(0.0, 0.0, None)

    return bench_replay.Job(Measurement(name, name, "ftrl", 1, 100), warm_up, run)


def test_measure_all_warms_up_then_runs_in_rounds_and_repeats_only_cheap_jobs() -> None:
    calls: list[str] = []
    jobs = [_job("cheap", [2.0, 3.0, 1.0], calls), _job("slow", [30.0], calls)]
    reported: list[str] = []
    measurements = bench_replay.measure_all(
        jobs, repeats=3, cheap_s=10.0, report=lambda job: reported.append(job.label.system)
    )
    assert calls == ["warm cheap", "warm slow", "cheap", "slow", "cheap", "cheap"]
    assert reported == calls[2:]
    assert [m.cpu_seconds for m in measurements] == [(2.0, 3.0, 1.0), (30.0,)]
    assert [m.seconds for m in measurements] == [(100.0,) * 3, (100.0,)]
    assert [m.log_loss for m in measurements] == [0.25, 0.25]


def _m(system: str, mode: str, b: int, seconds: float, rule: str = "ftrl") -> Measurement:
    return Measurement(system, mode, rule, b, 1000, seconds=(seconds,), cpu_seconds=(1.0,))


def test_ratios_and_target() -> None:
    measurements = [
        _m("online-ctr", "replay", 1, 1.0),
        _m("online-ctr", "replay", 256, 0.1),
        _m("online-ctr", "replay", 256, 0.01, rule="rda"),
        _m("river", "river", 1, 0.4),
        _m("vw", "pyvw-file", 1, 0.05),
    ]
    assert bench_replay.ratios(measurements) == pytest.approx(
        {
            "ftrl_b1_over_river": 0.4,
            "ftrl_b1_over_pyvw-file": 0.05,
            "ftrl_b256_over_river": 4.0,
            "ftrl_b256_over_pyvw-file": 0.5,
        }
    )
    assert set(bench_replay.ratios(measurements, cpu=True).values()) == {1.0}
    goal = bench_replay.target(measurements)
    assert goal == {"minimum": 5.0, "best_ratio": pytest.approx(4.0), "met": False}
    assert bench_replay.target(measurements, minimum=3.0)["met"]
    assert bench_replay.target(measurements[:1] + measurements[3:]) == {
        "minimum": 5.0,
        "best_ratio": None,  # no batch of 256 or more was measured
        "met": False,
    }


def test_format_table_has_one_line_per_measurement() -> None:
    table = bench_replay.format_table([_m("river", "river", 1, 0.5)]).splitlines()
    assert table[0].split() == [
        "system", "mode", "rule", "B", "examples/s", "ex/CPU-s", "runs", "log", "loss",
    ]  # fmt: skip
    assert table[1].split() == ["river", "river", "ftrl", "1", "2,000", "1,000", "1", "n/a"]


def test_parse_args_defaults_and_lists() -> None:
    args = bench_replay.parse_args([])
    assert (args.examples, args.batch_sizes, args.repeats) == (200_000, [1, 256, 1024], 3)
    assert args.rules == ["fobos", "ftrl", "l1sgd", "rda", "tg", "truncation"]
    assert bench_replay.parse_args(["--rules", "ftrl,rda"]).rules == ["ftrl", "rda"]
    assert bench_replay.parse_args(["--batch-sizes", "4,8"]).batch_sizes == [4, 8]


@pytest.mark.parametrize("argv", [["--rules", "sgd"], ["--batch-sizes", "0"], ["--examples", "0"]])
def test_parse_args_refuses_nonsense(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        bench_replay.parse_args(argv)


def test_every_system_scores_the_same_stream_alike(tmp_path: Path) -> None:
    rows = list(read_examples(CRITEO, "criteo", limit=300))
    params = FTRLParams()
    data = tmp_path / "rows.vw"
    _vw.write_lines(data, _vw.TextEncoder().lines(rows))
    ours = bench_replay.run_ours(rows, "ftrl", 1).log_loss
    vw_text = bench_replay.run_pyvw_text(rows, params).log_loss
    assert vw_text == pytest.approx(ours, abs=1e-6)  # same algorithm, float32 in VW
    assert bench_replay.run_pyvw_file(data, params, 300).log_loss == pytest.approx(
        vw_text, abs=1e-6
    )
    assert bench_replay.run_vw_cli(data, params, 300).log_loss == pytest.approx(vw_text, abs=1e-6)
    river = bench_replay.run_river(rows, params).log_loss
    assert river == pytest.approx(ours, abs=0.01)  # River's FTRL is one step behind
    assert river != pytest.approx(ours, abs=1e-6)


def test_main_prints_a_table_then_one_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--examples", "200", "--batch-sizes", "1,64", "--rules", "ftrl", "--repeats", "1"]
    assert bench_replay.main(argv) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    report = json.loads(lines[-1])
    assert report["examples"] == 200
    assert {(r["system"], r["mode"], r["batch_size"]) for r in report["results"]} == {
        ("online-ctr", "replay", 1),
        ("online-ctr", "replay", 64),
        ("river", "river", 1),
        ("vw", "pyvw-text", 1),
        ("vw", "pyvw-file", 1),
        ("vw", "vw-cli", 1),
    }
    modes = ("river", "pyvw-text", "pyvw-file", "vw-cli")
    assert set(report["ratios"]) == {f"ftrl_b{b}_over_{m}" for b in (1, 64) for m in modes}
    assert report["target"]["best_ratio"] is None  # no batch of 256 or more
    assert all(r["log_loss"] == pytest.approx(0.5, abs=0.1) for r in report["results"])
    assert any(line.startswith("online-ctr  replay") for line in lines)
