"""The quality section's pieces: the frontier's interpolation and the claim's verdict logic,
the sweep's configuration, one small real run per system, and the figures.

Nothing here asserts a timing. The real runs use DeepCTR's 200-row Criteo sample.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

# loadtests/ is not an installed package; pytest's `pythonpath = ["."]` would make this moot.
from loadtests.bench import baseline, claim, frontier, headline, quality, quality_runs
from loadtests.bench.frontier import Point
from loadtests.bench.quality_runs import SWEEPS, Job, Outcome
from loadtests.common import plots, readable
from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = ROOT.parent / "shared" / "data" / "criteo" / "criteo_deepctr_sample200.csv"

RDA = [Point(100, 0.50), Point(1000, 0.48), Point(10000, 0.479)]
FOBOS = [Point(300, 0.49), Point(3000, 0.47), Point(30000, 0.468)]
L1SGD_DENSE = [0.99, 1.0]


def test_envelope_drops_dominated_and_empty_points() -> None:
    points = [Point(0, 0.1), Point(10, 0.5), Point(20, 0.6), Point(30, 0.4), Point(10, 0.45)]
    assert frontier.envelope(points) == [Point(10, 0.45), Point(30, 0.4)]


def test_loss_at_interpolates_in_log_weights_and_hits_the_points() -> None:
    assert frontier.loss_at(RDA, 1000) == pytest.approx(0.48)
    assert frontier.loss_at(RDA, math.sqrt(100 * 1000)) == pytest.approx(0.49)
    assert frontier.loss_at(RDA, 99) is None
    assert frontier.loss_at(RDA, 10001) is None
    assert frontier.loss_at([], 10) is None


def test_weights_at_inverts_loss_at() -> None:
    for n in (150.0, 999.0, 4321.0):
        loss = frontier.loss_at(RDA, n)
        assert loss is not None
        assert frontier.weights_at(RDA, loss) == pytest.approx(n)
    assert frontier.weights_at(RDA, 0.6) == 100  # the sparsest point already does better
    assert frontier.weights_at(RDA, 0.4) is None  # never reached


def test_tuned_is_the_fewest_weights_within_slack_of_the_best() -> None:
    t = frontier.tuned(RDA, slack=0.002)
    assert t.best_logloss == 0.479
    assert t.logloss == pytest.approx(0.479 * 1.002)
    assert 1000 < t.nonzeros < 10000
    assert frontier.loss_at(RDA, t.nonzeros) == pytest.approx(t.logloss)


def test_matched_compares_over_the_shared_range_only() -> None:
    lower = [Point(p.nonzeros, p.logloss - 0.01) for p in RDA]
    m = frontier.matched(lower, RDA)
    assert m is not None
    assert (m.low, m.high) == (100, 10000)
    assert m.mean_difference == pytest.approx(-0.01)
    assert m.share_a_lower == 1.0
    m = frontier.matched(RDA, FOBOS)
    assert m is not None and (m.low, m.high) == (300, 10000)
    assert frontier.matched(RDA, [Point(5, 0.4), Point(50, 0.3)]) is None
    single = frontier.matched([Point(100, 0.5)], [Point(100, 0.6)])
    assert single is not None and single.mean_difference == pytest.approx(-0.1)


def test_verdict_reproduced_when_ftrl_has_rda_sparsity_at_fobos_accuracy() -> None:
    ftrl = [Point(100, 0.47), Point(1000, 0.466), Point(10000, 0.465)]
    sweeps = {"rda": RDA, "fobos": FOBOS, "ftrl": ftrl}
    v = frontier.verdict(sweeps, L1SGD_DENSE)
    assert v.fobos_more_accurate and v.fobos_less_sparse and v.l1sgd_barely_sparse
    assert v.ftrl_reaches is True
    assert v.gap_closed is not None and v.gap_closed > 1
    assert v.outcome == claim.word(v) == "reproduced"
    assert v.ftrl_vs_rda is not None and v.ftrl_vs_rda.share_a_lower == 1.0


def test_verdict_allows_the_tolerance_above_fobos_s_accuracy() -> None:
    # At RDA's tuned weights (about 1,100) this FTRL is 2.2e-5 above FOBOS's tuned loss.
    ftrl = [Point(100, 0.475), Point(1000, 0.469), Point(10000, 0.468)]
    v = frontier.verdict({"rda": RDA, "fobos": FOBOS, "ftrl": ftrl}, L1SGD_DENSE)
    assert v.ftrl_at_rda_sparsity is not None
    assert 0 < v.ftrl_at_rda_sparsity - v.fobos.logloss < frontier.TOLERANCE
    assert v.ftrl_reaches is True
    assert v.gap_closed is not None and 0.99 < v.gap_closed < 1


def test_verdict_not_reproduced_when_ftrl_is_only_as_good_as_rda() -> None:
    sweeps = {"rda": RDA, "fobos": FOBOS, "ftrl": RDA}
    v = frontier.verdict(sweeps, L1SGD_DENSE)
    assert v.ftrl_reaches is False
    assert v.gap_closed == pytest.approx(0.0)
    assert v.outcome == claim.word(v) == "not reproduced"


def test_verdict_partly_when_ftrl_is_nearer_fobos_s_accuracy_than_rda_s() -> None:
    ftrl = [Point(100, 0.48), Point(1000, 0.4735), Point(10000, 0.47)]
    v = frontier.verdict({"rda": RDA, "fobos": FOBOS, "ftrl": ftrl}, L1SGD_DENSE)
    assert v.ftrl_reaches is False
    assert v.gap_closed is not None and frontier.PARTLY < v.gap_closed < 1
    assert v.outcome == "partly reproduced"
    v = frontier.verdict({"rda": RDA, "fobos": FOBOS, "ftrl": ftrl}, [0.2])
    assert v.outcome == "not reproduced"  # L1-SGD turned out sparse


def test_verdict_needs_every_other_part_too() -> None:
    ftrl = [Point(100, 0.47), Point(1000, 0.466), Point(10000, 0.465)]
    v = frontier.verdict({"rda": RDA, "fobos": FOBOS, "ftrl": ftrl}, [0.5])
    assert v.ftrl_reaches is True and not v.l1sgd_barely_sparse
    assert v.outcome == "not reproduced"


def test_verdict_parts_that_can_fail_on_their_own() -> None:
    far_ftrl = [Point(50_000, 0.46), Point(90_000, 0.45)]
    v = frontier.verdict({"rda": RDA, "fobos": RDA, "ftrl": far_ftrl}, [0.5, 1.0])
    assert v.ftrl_at_rda_sparsity is None and v.ftrl_reaches is None
    assert claim.word(v).startswith("undetermined")
    assert v.gap_closed is None  # FOBOS is not more accurate: no gap to close
    assert not v.fobos_more_accurate and not v.fobos_less_sparse
    assert v.l1sgd_min_share == 0.5 and not v.l1sgd_barely_sparse


def test_every_sweep_holds_its_default_and_quick_keeps_ends_and_default() -> None:
    for rule, sweep in SWEEPS.items():
        assert sweep.default in sweep.values, rule
        assert list(sweep.values) == sorted(sweep.values), rule
        assert sweep.quick() == tuple(sorted({sweep.values[0], sweep.default, sweep.values[-1]})), (
            rule
        )
        settings = sweep.settings(sweep.default)
        quality_runs.get_rule(rule).params(**settings)  # every setting is valid
        assert settings[sweep.knob] == sweep.default


def test_jobs_cover_every_sweep_value_and_the_references_per_dataset(tmp_path: Path) -> None:
    jobs = quality_runs.jobs_for(tmp_path, quick=False)
    per_dataset = sum(len(s.values) for s in SWEEPS.values()) + len(quality_runs.REFERENCES)
    assert len(jobs) == (per_dataset + 1) * len(quality_runs.DATASETS)  # + the running mean
    assert [j.dataset for j in jobs if j.system == quality_runs.MEAN] == list(quality_runs.DATASETS)
    assert {j.rows for j in jobs} == {None}
    quick = quality_runs.jobs_for(tmp_path, quick=True)
    assert {j.rows for j in quick} == {quality_runs.QUICK_ROWS}
    assert len(quick) < len(jobs)


def test_checkpoints_and_describe() -> None:
    assert quality_runs.checkpoint_every(10_000) == 100
    assert quality_runs.checkpoint_every(7) == 1
    assert quality_runs.describe({"l1": 1e-4, "k": 10}) == "l1=0.0001 k=10"


@pytest.fixture(scope="module")
def sample_outcomes() -> dict[str, Outcome]:
    """FTRL, VW and River at FTRL's default setting on the 200-row sample."""
    jobs = {
        name: Job("sample", name, quality_runs.FTRL_SETTINGS, SAMPLE, "criteo", None)
        for name in ("ftrl", "vw", "river")
    }
    return {name: quality_runs.run_job(job) for name, job in jobs.items()}


def test_a_rule_run_records_curves_that_end_at_its_totals(
    sample_outcomes: dict[str, Outcome],
) -> None:
    ours = sample_outcomes["ftrl"]
    assert ours.examples == 200
    assert ours.checkpoints == tuple(range(2, 201, 2))
    assert ours.logloss_curve[-1] == pytest.approx(ours.logloss)
    assert ours.nonzero_curve[-1] == ours.nonzeros
    assert 0 < ours.nonzeros <= ours.tracked


def test_vw_and_river_are_scored_like_ours(sample_outcomes: dict[str, Outcome]) -> None:
    ours, vw, river = (sample_outcomes[n] for n in ("ftrl", "vw", "river"))
    # VW has no base-rate prior: it scores as our model without one, to rounding.
    rule = get_rule("ftrl")
    plain = InMemoryModel(rule, rule.params(**ours.job.settings), base_rate=BaseRate("off"))
    rows = quality_runs.load(SAMPLE, "criteo", None)
    without = replay(rows, plain, FeatureHasher(), batch_size=1)
    assert without.logloss == pytest.approx(vw.logloss, abs=1e-9)
    assert vw.nonzeros == without.nonzero_weights and vw.tracked == ours.tracked
    assert ours.logloss < vw.logloss  # the prior's gain, on this 24.5% CTR sample too
    assert vw.logloss_curve[-1] == pytest.approx(vw.logloss)
    assert vw.nonzero_curve == () == river.nonzero_curve
    assert river.examples == 200 and river.logloss != ours.logloss  # River is not Algorithm 1
    assert quality.vw_gap([ours, vw]) == pytest.approx(ours.logloss - vw.logloss)
    assert quality.vw_gap([ours]) is None


def test_the_mean_baseline_is_scored_like_the_models() -> None:
    job = Job("sample", quality_runs.MEAN, {}, SAMPLE, "criteo", None)
    mean = quality_runs.run_job(job)
    labels = [label for _, label in quality_runs.load(SAMPLE, "criteo", None)]
    assert mean.examples == 200
    assert mean.logloss == pytest.approx(baseline.running_mean_logloss(labels), rel=1e-12)
    assert mean.logloss_curve[-1] == pytest.approx(mean.logloss)


def _outcome(
    system: str, value: float, nonzeros: int, tracked: int = 100, logloss: float = 0.5
) -> Outcome:
    sweep = SWEEPS[system]
    job = Job("d", system, sweep.settings(value), SAMPLE, "criteo", None)
    return Outcome(job, 10, logloss, None, None, nonzeros, tracked, (10,), (0.5,), (nonzeros,))


def _mean(logloss: float, dataset: str = "d") -> Outcome:
    job = Job(dataset, quality_runs.MEAN, {}, SAMPLE, "criteo", None)
    return Outcome(job, 10, logloss, None, 1.0, 1, 1, (10,), (logloss,), ())


def test_broken_runs_are_shown_as_such_and_never_ranked() -> None:
    good = _outcome("ftrl", 1.0, 40, logloss=0.47)
    worse = _outcome("ftrl", 30.0, 4, logloss=0.53)  # worse than the mean
    empty = _outcome("ftrl", 10.0, 0, logloss=0.49)  # no weight left
    outcomes = [good, worse, empty, _mean(0.52)]
    means = quality.means_of(outcomes)
    assert means == {"d": 0.52}
    assert quality.points(outcomes, "d", "ftrl") == [Point(40, 0.47)]
    assert [quality.standing(o, means) for o in outcomes] == [
        "0.05000 below the mean",
        "broken: worse than the mean",
        "broken: no nonzero weight",
        "the baseline to beat",
    ]
    text = quality.quality_table(outcomes, means)
    assert text.count("broken: worse than the mean") == 1
    assert "| always predict the running mean CTR | none | 0.52000 | n/a |" in text


def test_the_claim_is_not_tested_where_every_run_is_worse_than_the_mean() -> None:
    outcomes = [
        _outcome("ftrl", 1.0, 40, logloss=0.06),
        _outcome("rda", 1e-4, 40, logloss=0.055),
        _outcome("fobos", 1e-4, 40, logloss=0.049),
        _outcome("l1sgd", 1e-3, 40, logloss=0.07),
        _mean(0.054),
    ]
    sweeps = quality.sweeps_of(outcomes, "d")
    assert sweeps["fobos"] == [Point(40, 0.049)] and sweeps["ftrl"] == []
    reason = quality.untestable(sweeps)
    assert reason == "every run of ftrl, rda, l1sgd is worse than always predicting the mean CTR"
    text = claim.claim_section({}, {"d": sweeps}, outcomes, {"d": 0.054}, {"d": reason})
    assert "- **d: not testable.** Every run of ftrl, rda, l1sgd is worse" in text
    assert "| d | fobos - rda |" not in text  # its frontiers are not compared
    assert text.count("broken: worse than the mean") == 3  # the raw sweep still shows them


def test_a_broken_ftrl_headline_has_no_verdict() -> None:
    ftrl = replace(_outcome("ftrl", 1.0, 40, logloss=0.06), job=replace(
        _outcome("ftrl", 1.0, 40).job, settings=quality_runs.FTRL_SETTINGS
    ))  # fmt: skip
    vw = replace(ftrl, job=replace(ftrl.job, system="vw"))
    (line,) = quality.vw_headline("d", [ftrl, vw], {"d": 0.054})
    assert line.broken == baseline.WORSE and line.baseline_value == 0.06
    assert headline.row(line)[-1] == "broken: worse than the mean"
    (fine,) = quality.vw_headline("d", [ftrl, vw], {"d": 0.07})
    assert fine.broken == "" and headline.row(fine)[-1] == "met"


def test_defaults_pick_each_sweep_s_default_in_table_order() -> None:
    outcomes = [
        _outcome("rda", SWEEPS["rda"].default, 5),
        _outcome("ftrl", SWEEPS["ftrl"].values[0], 50),
        _outcome("ftrl", SWEEPS["ftrl"].default, 40),
    ]
    chosen = quality.defaults(outcomes, "d")
    assert [(o.job.system, o.nonzeros) for o in chosen] == [("ftrl", 40), ("rda", 5)]
    assert quality.defaults(outcomes, "other") == []


def test_l1sgd_shares_are_nonzero_over_tracked() -> None:
    outcomes = [_outcome("l1sgd", 0.1, 90), _outcome("l1sgd", 0.3, 100), _outcome("rda", 0.1, 1)]
    outcomes.append(_mean(0.9))
    assert quality.l1sgd_shares(outcomes, "d") == [0.9, 1.0]


def test_claim_text_carries_the_numbers() -> None:
    ftrl = [Point(100, 0.48), Point(1000, 0.4735), Point(10000, 0.47)]
    v = frontier.verdict({"rda": RDA, "fobos": FOBOS, "ftrl": ftrl}, L1SGD_DENSE)
    text = claim.sentence("criteo", v)
    assert text.startswith("- **criteo: partly reproduced.**")
    assert f"{v.fobos.logloss:.5f}" in text and "does not reach" in text
    assert f"closes {v.gap_closed:.0%} of the" in text
    assert claim.verdict_table({"criteo": v}).count("\n") == 2
    far = {"rda": RDA, "fobos": FOBOS, "ftrl": [Point(1, 0.4), Point(2, 0.3)]}
    assert "no overlap" in claim.matched_table({"criteo": far})


def test_limits_skip_the_noisy_start_and_the_hopeless_runs() -> None:
    curve = plots.Curve("ftrl", "FTRL", [1, 2, 3, 4], [5.0, 0.6, 0.5, 0.4])
    low, high = plots.loss_limits([curve], skip_share=0.25)
    assert low < 0.4 and 0.6 < high < 5.0
    low, high = plots.frontier_limits([0.5, 0.51, 3.0], span=0.1)
    assert low < 0.5 and 0.55 <= high < 0.6


def test_a_figure_without_title_units_or_legend_is_refused(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    def attempt(title: str, x_label: str, legend: bool) -> None:
        figure, axis = plt.subplots()
        axis.plot([1, 2], [3, 4], label="a curve")
        axis.set_title(title)
        axis.set_xlabel(x_label)
        axis.set_ylabel("latency (ms)")
        if legend:
            axis.legend()
        try:
            readable.save(figure, tmp_path / "f.png")
        finally:
            plt.close(figure)

    for title, x_label, legend, missing in [
        ("", "time (s)", True, "a title"),
        ("T", "time", True, "a x label with its unit"),
        ("T", "time (s)", False, "a legend"),
    ]:
        with pytest.raises(readable.IncompleteFigure, match=missing):
            attempt(title, x_label, legend)
        assert not (tmp_path / "f.png").exists()
    attempt("T", "time (s)", True)
    assert (tmp_path / "f.png").exists()


def test_a_cdf_spans_its_samples_and_the_target(tmp_path: Path) -> None:
    curve = plots.Curve("ftrl", "20 samples", [], [40.0 + i for i in range(20)])
    target = ("target: p99 <= 100 ms", 100.0)
    path = plots.cdf_figure(tmp_path / "c.png", "Freshness", "time (ms)", curve, target)
    # The axis ends just past the samples or a near target: the curve fills the chart, not
    # 7% of it as the 1 s target left it when samples took 50 ms.
    assert plots.cdf_right_edge(curve.y, 100.0) == pytest.approx(108.0)
    assert plots.cdf_right_edge(curve.y, 1000.0) == pytest.approx(1.08 * 59.0)
    assert plots.cdf_right_edge([5.0], None) == pytest.approx(5.4)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figures_are_png_files(tmp_path: Path) -> None:
    x = np.arange(1, 11)
    curves = [plots.Curve(s, s, x, 0.5 + 1 / x) for s in ("ftrl", "vw", "unknown-system")]
    weights = [plots.Curve("ftrl", "ftrl", x, x * 10)]
    stream = plots.stream_figure(tmp_path / "img" / "s.png", "title", curves, weights)
    panels = {"a": [replace(curves[0], x=[10, 100], y=[0.5, 0.4])], "b": curves[:1]}
    marks = {"a": [plots.Curve("vw", "VW", [50], [0.45])]}
    lines = {"a": ("always predict the mean", 0.6), "c": ("always predict the mean", 0.05)}
    front = plots.frontier_figure(tmp_path / "f.png", {**panels, "c": []}, marks, lines)
    for path in (stream, front):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
