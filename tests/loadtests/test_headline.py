"""The report's opening and its honesty rules, from small made-up inputs: the headline table
(each figure beside its baseline and target, in words), the running-mean baseline, and
broken models kept out of every verdict and ranking.

Real numbers are measured by ``python -m loadtests.bench``; none is asserted here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from loadtests.bench import baseline, headline, ingest, learning, learning_runs, serving
from loadtests.bench import run as bench
from loadtests.bench.bench_replay import Measurement
from loadtests.bench.drain import DrainRun
from loadtests.common import report
from loadtests.common.report import Headline, Section, Target
from loadtests.common.tools import WrkResult
from loadtests.common.wrk_runs import LoadRun

BARE = "a bare FastAPI endpoint that parses the same body"


def _predict(value: float, bare: float) -> Headline:
    return Headline("Single `/predict`", value, "requests/s", BARE, bare, Target(0.9, "ratio"))


def test_a_headline_row_gives_the_figure_its_baseline_ratio_target_and_verdict() -> None:
    assert headline.row(_predict(7900.0, 8500.0)) == [
        "Single `/predict`",
        "7,900 requests/s",
        f"0.93x {BARE} (8,500 requests/s)",
        ">= 0.9x",
        "met",
    ]
    assert headline.row(_predict(3983.0, 8860.0))[-1] == "NOT met"


@pytest.mark.parametrize(
    ("target", "value", "baseline_value", "met"),
    [
        (Target(0.5, "ratio"), 60.0, 100.0, True),
        (Target(0.5, "ratio"), 40.0, 100.0, False),
        (Target(1.5, "ratio", at_most=True), 14.0, 10.0, True),  # a p99 against bare's
        (Target(1.5, "ratio", at_most=True), 16.0, 10.0, False),
        (Target(200_000, "value"), 210_000.0, None, True),
        (Target(100, "value", at_most=True), 101.0, None, False),  # freshness in ms
        (Target(2e-4, "gap"), 0.4710, 0.4708, True),
        (Target(2e-4, "gap"), 0.4705, 0.4708, False),
        (Target(0.5, "ratio"), 60.0, None, None),  # no baseline measured
        (Target(100, "value", at_most=True), math.inf, None, None),  # never reflected
    ],
)
def test_targets_judge_value_ratio_and_gap_bounds(
    target: Target, value: float, baseline_value: float | None, met: bool | None
) -> None:
    assert target.met(value, baseline_value) is met


def test_absolute_targets_and_rows_without_a_baseline_read_in_words() -> None:
    ingest = Headline("`/learn` ingest", 123_456.0, "examples/s", target=Target(100_000, "value"))
    assert headline.row(ingest) == [
        "`/learn` ingest",
        "123,456 examples/s",
        "none",
        ">= 100,000 examples/s",
        "met",
    ]
    fresh = Headline("Freshness p99", 46.5, "ms", target=Target(100, "value", at_most=True))
    assert headline.row(fresh)[1:] == ["46.5 ms", "none", "<= 100 ms", "met"]
    river = Headline("Replay against River", 90_000.0, "examples/s", "River", 22_000.0)
    assert headline.row(river)[2:] == ["4.09x River (22,000 examples/s)", "none", "no target"]


def test_a_broken_model_gets_no_ratio_and_no_verdict() -> None:
    broken = Headline(
        "Replay", 500_000.0, "examples/s", "Vowpal Wabbit", 100_000.0, Target(0.5, "ratio"),
        note="log loss 2.23", broken=baseline.WORSE,
    )  # fmt: skip
    cells = headline.row(broken)
    assert cells[2] == "Vowpal Wabbit (100,000 examples/s)"  # no "5.00x"
    assert cells[4] == "broken: worse than the mean"
    assert "x " not in cells[2]


def test_the_paragraph_counts_only_judged_targets_and_names_what_failed() -> None:
    lines = [
        _predict(7900.0, 8500.0),
        _predict(3000.0, 8500.0),
        Headline("Broken replay", 1.0, "examples/s", target=Target(0.5, "value"), broken="x"),
        Headline("Against River", 2.0, "examples/s", "River", 1.0),
    ]
    text = headline.paragraph(lines)
    assert "1 of 2 targets met" in text
    assert "Not met, or not measured: Single `/predict`." in text
    assert "because a model in the comparison is broken" in text and "Broken replay" in text


def test_numbers_read_as_people_write_them() -> None:
    assert [headline.number(v) for v in (1234567.0, 123.4, 12.34, 1.234, 0.0471717)] == [
        "1,234,567",
        "123",
        "12.3",
        "1.23",
        "0.047172",
    ]
    assert headline.number(math.nan, "ms") == "n/a ms"


def test_the_report_lists_headlines_of_every_section_in_order(tmp_path: Path) -> None:
    first = Section("Serving", "s", headlines=(_predict(7900.0, 8500.0),))
    second = Section(
        "Freshness",
        "f",
        headlines=(Headline("Freshness p99", 46.5, "ms", target=Target(100, "value", True)),),
    )
    text = bench.render([first, second], {"date": "today"}, tmp_path)
    opening = text.split("## Serving")[0]
    assert opening.index("Single `/predict`") < opening.index("Freshness p99")
    assert "2 of 2 targets met" in opening


# The running mean: the baseline every model must beat.


def test_running_mean_predicts_the_smoothed_rate_before_each_label() -> None:
    labels = [1, 0, 0, 1, 1]
    expected = [(sum(labels[:t]) + 0.5) / (t + 1) for t in range(len(labels))]
    assert baseline.running_mean_probabilities(labels).tolist() == pytest.approx(expected)


def test_running_mean_log_loss_is_the_mean_of_its_progressive_losses() -> None:
    labels = [0, 1, 0, 0, 1, 0, 0, 0]
    p = baseline.running_mean_probabilities(labels)
    literal = [-(math.log(q) if y else math.log(1 - q)) for q, y in zip(p, labels, strict=True)]
    assert baseline.running_mean_logloss(labels) == pytest.approx(sum(literal) / len(literal))


def test_running_mean_approaches_the_entropy_of_the_click_rate() -> None:
    # KT regret is (1/2) log n / n + O(1/n) per example: under 1e-3 nats at this length.
    rng = np.random.default_rng(0)
    labels = (rng.random(200_000) < 0.2).astype(float)
    rate = labels.mean()
    entropy = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
    assert baseline.running_mean_logloss(labels) == pytest.approx(entropy, abs=1e-3)


def test_running_mean_refuses_no_labels() -> None:
    with pytest.raises(ValueError, match="no labels"):
        baseline.running_mean_logloss([])


@pytest.mark.parametrize(
    ("logloss", "nonzeros", "reason"),
    [
        (0.47, 3509, ""),
        (0.52, 3509, baseline.WORSE),  # ties the mean: not better than it
        (2.23, 3509, baseline.WORSE),  # the batch-4,096 model of issue 8
        (0.47, 0, baseline.EMPTY),  # a model with no weight left
        (math.nan, 10, baseline.WORSE),
        (None, None, baseline.WORSE),
    ],
)
def test_broken_is_no_better_than_the_mean_or_no_weight(
    logloss: float | None, nonzeros: int | None, reason: str
) -> None:
    assert baseline.broken(logloss, nonzeros, mean_logloss=0.52) == reason


@pytest.mark.parametrize("module", [headline, baseline, report], ids=lambda m: m.__name__)
def test_docstring_examples(module: object) -> None:
    import doctest

    failed, attempted = doctest.testmod(module, report=False)  # type: ignore[arg-type]
    assert (failed, attempted > 0) == (0, True)


# Sections' headlines from made-up measurements.


def _measurement(mode: str, seconds: float, logloss: float) -> Measurement:
    system = {"replay": "online-ctr", "vw-cli": "vw", "river": "river"}[mode]
    return Measurement(system, mode, "ftrl", 1, 200_000, (seconds,), (seconds,), logloss)


def _learning(replay_logloss: float) -> learning_runs.LearningResult:
    result = learning_runs.LearningResult(200_000, mean_logloss=0.52)
    result.timed = [
        _measurement("replay", 2.0, replay_logloss),
        _measurement("vw-cli", 1.0, 0.4708),
        _measurement("river", 10.0, 0.4717),
    ]
    cores = {"worker": 1.0, "redis": 0.3}
    result.drains = [
        DrainRun(1, 200_000, 4.0, {}, cores, replay_logloss),
        DrainRun(1000, 200_000, 1.0, {}, cores, replay_logloss),
    ]
    return result


def test_learning_headlines_compare_the_replay_with_vw_and_river() -> None:
    vw, river, drain = learning.headlines(_learning(0.4708))
    assert headline.row(vw)[1:] == [
        "100,000 examples/s (log loss 0.47080, VW's 0.47080)",
        "0.50x Vowpal Wabbit's native `--ftrl`, same rows, whole process (200,000 examples/s)",
        ">= 0.5x",
        "met",
    ]
    assert headline.row(river)[2].startswith("5.00x River's")
    assert headline.row(river)[-1] == "no target"
    assert drain.what.endswith("entries of 1,000 examples")
    assert headline.row(drain)[1:3] == [
        "200,000 examples/s (log loss 0.47080)",
        "2.00x `online-ctr replay` of the same rows, whole process (100,000 examples/s)",
    ]
    assert headline.row(drain)[-1] == "met"
    text = learning.render(_learning(0.4708))
    assert "0.50x (target >= 0.5x: met)" in text and "0.52000" in text


def test_a_broken_replay_is_not_compared_with_anything() -> None:
    result = _learning(2.23)  # the summed-gradient batch-4,096 model of issue 8
    for line in learning.headlines(result):
        assert headline.row(line)[-1] == "broken: worse than the mean"
        assert "x " not in headline.row(line)[2]
    text = learning.render(result)
    assert "not judged: a model is broken" in text
    assert text.count("worse than the mean") >= 1
    assert math.isnan(learning_runs.ratio(result, 100_000.0, 2.23, "vw-cli"))


def _wrk(requests: int, p99_ms: float) -> WrkResult:
    return WrkResult(requests, 10.0, 0, p99_ms / 2, p99_ms / 1.5, p99_ms, p99_ms / 2, p99_ms)


def _load(endpoint: str, batch: int, requests: int, p99_ms: float) -> LoadRun:
    cores = {"api": 1.0, "bare": 1.0, "redis": 0.2, "wrk": 0.1}
    return LoadRun(endpoint, batch, 32, _wrk(requests, p99_ms), cores)


def test_serving_headlines_judge_requests_p99_batch_and_ingest() -> None:
    runs = [
        _load("noop", 1, 100_000, 5.0),
        _load("bare", 1, 80_000, 8.0),
        _load("predict", 1, 76_000, 11.0),
        _load("bare", 1000, 300, 100.0),
        _load("predict", 1000, 210, 150.0),
    ]
    ingested = ingest.Ingest(_load("learn", 1000, 900, 120.0), 905_000)
    single, p99, batch, learn = serving.headlines(runs, ingested)
    assert headline.row(single)[2:] == [
        f"0.95x {serving.BARE} (8,000 requests/s)",
        ">= 0.9x",
        "met",
    ]
    assert headline.row(p99)[2:] == [f"1.38x {serving.BARE} (8.00 ms)", "<= 1.5x", "met"]
    assert headline.row(batch)[1] == "21,000 examples/s"
    assert headline.row(batch)[3:] == [">= 200,000 examples/s", "NOT met"]
    assert headline.row(learn)[1:] == [
        "90,000 examples/s",
        "none",
        ">= 100,000 examples/s",
        "NOT met",
    ]
    text = serving.render(runs, ingested)
    assert "900,000 answered 202" in text and "905,000" in text


def test_the_single_headline_is_the_median_round_as_the_section_judges() -> None:
    # Rounds of 0.95, 0.80 and 0.85: the median ratio is 0.85 (not met), though the ratio
    # of the medians (7,600 / 8,000 = 0.95) would say met.
    runs = [
        _load("noop", 1, 100_000, 5.0),
        _load("bare", 1, 80_000, 8.0),
        _load("predict", 1, 76_000, 8.0),
        _load("bare", 1, 95_000, 8.0),
        _load("predict", 1, 76_000, 10.0),
        _load("bare", 1, 40_000, 8.0),
        _load("predict", 1, 34_000, 12.0),
        _load("bare", 1000, 300, 100.0),
        _load("predict", 1000, 210, 150.0),
    ]
    ingested = ingest.Ingest(_load("learn", 1000, 900, 120.0), 905_000)
    single, p99, *_ = serving.headlines(runs, ingested)
    assert headline.row(single)[2:] == [
        f"0.85x {serving.BARE} (4,000 requests/s)",
        ">= 0.9x",
        "NOT met",
    ]
    assert headline.row(p99)[2] == f"1.25x {serving.BARE} (8.00 ms)"
    assert "median of 3 alternating rounds: 0.85x" in serving.render(runs, ingested)


def test_the_drain_judged_is_the_median_round_of_the_largest_entries() -> None:
    result = _learning(0.4708)
    cores = {"worker": 1.0, "redis": 0.3}
    # Rounds alternate entry sizes; the entries of 1 are faster here, and never judged.
    result.drains = [
        DrainRun(per_entry, 200_000, seconds, {}, cores, 0.4708)
        for per_entry, seconds in [
            (1, 0.1),
            (1000, 2.0),
            (1, 0.1),
            (1000, 1.0),
            (1, 0.1),
            (1000, 4.0),
        ]
    ]
    judged = result.judged_drain()
    assert (judged.per_entry, judged.seconds) == (1000, 2.0)
    *_, drain = learning.headlines(result)
    assert headline.row(drain)[1].startswith("100,000 examples/s")
