"""The seeds' claim in the report: the verdict per dataset, what it rests on, the raw sweep.

Everything here is text built from :mod:`loadtests.bench.frontier`'s numbers; no verdict is typed
in by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from loadtests.bench import baseline, frontier
from loadtests.bench.quality_runs import SWEEPS, Outcome
from loadtests.common.report import Cell, table

Sweeps = Mapping[str, Sequence[frontier.Point]]

#: Pairs compared at matched nonzero counts: (first, second) reports first - second.
PAIRS = (("ftrl", "rda"), ("ftrl", "fobos"), ("fobos", "rda"))

DEFINITIONS = (
    "How the claim is tested, from the sweep alone. A rule's *frontier* is the lower-left "
    "envelope of its sweep points (nonzero weights at the end, progressive log loss), joined "
    "by straight lines in log(weights). A rule's *tuned* point is where its frontier first "
    "comes within {slack:.1%} of its own best log loss: the largest l1 that costs at most "
    "that much accuracy. With RDA's tuned point (N_rda weights, loss L_rda) and FOBOS's "
    "(N_fobos, L_fobos): *FOBOS more accurate but less sparse than RDA* means L_fobos < L_rda "
    "and N_fobos > N_rda; *FTRL reaches RDA's sparsity at FOBOS's accuracy* means FTRL's "
    "frontier at N_rda weights is at most L_fobos + {tolerance:g}; *gap closed* is how much "
    "of the way from L_rda to L_fobos FTRL gets at N_rda weights (1 = all of it); *L1-SGD "
    "barely sparse* means it keeps at least {dense:.0%} of the weights it tracks at every "
    "swept l1. The claim is *reproduced* when all four hold, *partly reproduced* when the "
    "other three hold and FTRL closes at least {partly:.0%} of the gap (its accuracy at RDA's "
    "sparsity is nearer FOBOS's than RDA's), *not reproduced* otherwise. Our RDA is the "
    "seed's, with one global rate sqrt(t)/gamma; FOBOS, TG, truncation, L1-SGD and FTRL have "
    "per-coordinate rates alpha/(beta + sqrt(n)). TG with theta = inf is FOBOS's L1 step "
    "applied in bulk every k rounds, so its curve lies on FOBOS's."
)


def word(v: frontier.Verdict) -> str:
    """The claim's verdict in a word or two."""
    if v.outcome == "undetermined":
        return "undetermined (FTRL's sweep does not reach RDA's sparsity)"
    return v.outcome


def _yes(flag: bool | None) -> str:
    return {True: "yes", False: "no", None: "n/a"}[flag]


def verdict_table(verdicts: Mapping[str, frontier.Verdict]) -> str:
    header = [
        "dataset",
        "RDA tuned: weights",
        "RDA tuned: log loss",
        "FOBOS tuned: weights",
        "FOBOS tuned: log loss",
        "FOBOS more accurate, less sparse",
        "FTRL log loss at RDA's weights",
        "gap closed",
        "FTRL reaches",
        "L1-SGD fewest nonzero / tracked",
        "claim",
    ]
    rows = [
        [
            dataset,
            round(v.rda.nonzeros),
            v.rda.logloss,
            round(v.fobos.nonzeros),
            v.fobos.logloss,
            f"{_yes(v.fobos_more_accurate)}, {_yes(v.fobos_less_sparse)}",
            v.ftrl_at_rda_sparsity,
            v.gap_closed,
            _yes(v.ftrl_reaches),
            v.l1sgd_min_share,
            word(v),
        ]
        for dataset, v in verdicts.items()
    ]
    return table(header, rows, digits=5)


def matched_table(sweeps: Mapping[str, Sweeps]) -> str:
    """Each pair of rules at matched nonzero counts, over the range both sweeps cover."""
    rows: list[list[Cell]] = []
    for dataset, by_rule in sweeps.items():
        for a, b in PAIRS:
            m = frontier.matched(by_rule[a], by_rule[b])
            if m is None:
                rows.append([dataset, f"{a} - {b}", "no overlap", None, None])
                continue
            span = f"{round(m.low):,} to {round(m.high):,}"
            rows.append([dataset, f"{a} - {b}", span, m.mean_difference, m.share_a_lower])
    header = ["dataset", "log loss of", "weights compared", "mean difference", "first lower at"]
    return table(header, rows, digits=5)


def sentence(dataset: str, v: frontier.Verdict) -> str:
    """One dataset's verdict in words, with its numbers."""
    fobos_vs_rda = (
        f"FOBOS's tuned log loss is {v.fobos.logloss:.5f} with {v.fobos.nonzeros:,.0f} weights, "
        f"RDA's {v.rda.logloss:.5f} with {v.rda.nonzeros:,.0f}: FOBOS "
        f"{'is' if v.fobos_more_accurate else 'is not'} more accurate and "
        f"{'is' if v.fobos_less_sparse else 'is not'} less sparse."
    )
    if v.ftrl_at_rda_sparsity is None:
        ftrl = "FTRL's sweep does not reach RDA's weight count, so its part is undetermined."
    else:
        excess = v.ftrl_at_rda_sparsity - v.fobos.logloss
        closed = "n/a" if v.gap_closed is None else f"{v.gap_closed:.0%}"
        ftrl = (
            f"At RDA's {v.rda.nonzeros:,.0f} weights FTRL's log loss is "
            f"{v.ftrl_at_rda_sparsity:.5f}, {excess:+.5f} from FOBOS's tuned accuracy "
            f"(it closes {closed} of the RDA-to-FOBOS gap): it "
            f"{'does' if v.ftrl_reaches else 'does not'} reach RDA's sparsity at FOBOS's "
            "accuracy."
        )
    l1sgd = (
        f"L1-SGD keeps at least {v.l1sgd_min_share:.1%} of its tracked weights at every l1: "
        f"{'barely sparse, as claimed' if v.l1sgd_barely_sparse else 'sparser than claimed'}."
    )
    matched = " ".join(
        f"At matched weight counts ({m.low:,.0f} to {m.high:,.0f}) FTRL's log loss minus "
        f"{other}'s averages {m.mean_difference:+.5f}, and FTRL is lower at "
        f"{m.share_a_lower:.0%} of the counts."
        for other, m in (("RDA", v.ftrl_vs_rda), ("FOBOS", v.ftrl_vs_fobos))
        if m is not None
    )
    return f"- **{dataset}: {word(v)}.** {fobos_vs_rda} {ftrl} {matched} {l1sgd}"


def sweep_table(outcomes: Sequence[Outcome], means: Mapping[str, float]) -> str:
    """Every sweep run's numbers, broken runs (left out of the frontiers) marked."""
    rows: list[list[Cell]] = [_sweep_row(o, means) for o in outcomes if o.job.system in SWEEPS]
    header = ["dataset", "rule", "knob", "nonzero weights", "tracked", "log loss", "AUC"]
    return table([*header, "ranked"], rows, digits=5)


def _sweep_row(o: Outcome, means: Mapping[str, float]) -> list[Cell]:
    row: list[Cell] = [o.job.dataset, o.job.system, _knob(o), o.nonzeros, o.tracked]
    return [*row, o.logloss, o.auc, _broken(o, means)]


def _broken(outcome: Outcome, means: Mapping[str, float]) -> str:
    reason = baseline.broken(outcome.logloss, outcome.nonzeros, means[outcome.job.dataset])
    return f"broken: {reason}" if reason else "yes"


def untestable_sentence(dataset: str, reason: str, mean: float) -> str:
    """Why a dataset has no verdict."""
    return (
        f"- **{dataset}: not testable.** {reason[0].upper()}{reason[1:]} (its log loss, "
        f"{mean:.5f}), so no rule is ranked on this file."
    )


def _knob(outcome: Outcome) -> str:
    knob = SWEEPS[outcome.job.system].knob
    return f"{knob}={outcome.job.settings[knob]:g}"


def claim_section(
    verdicts: Mapping[str, frontier.Verdict],
    sweeps: Mapping[str, Sweeps],
    outcomes: Sequence[Outcome],
    means: Mapping[str, float],
    untestable: Mapping[str, str],
) -> str:
    """The frontier's Markdown: definitions, verdicts, matched comparisons, raw sweep.

    Broken runs are not in ``sweeps``; a dataset in ``untestable`` (with the reason) has no
    verdict, and its frontiers are not compared.
    """
    sentences = [sentence(d, v) for d, v in verdicts.items()]
    sentences += [untestable_sentence(d, why, means[d]) for d, why in untestable.items()]
    compared = {d: by_rule for d, by_rule in sweeps.items() if d in verdicts}
    definitions = DEFINITIONS.format(
        slack=frontier.SLACK,
        tolerance=frontier.TOLERANCE,
        dense=frontier.DENSE_SHARE,
        partly=frontier.PARTLY,
    )
    return "\n\n".join(
        [
            "### Does our data reproduce the seeds' claim?",
            "Seeds `000` and `003` (and McMahan, AISTATS 2011) claim that on the same stream "
            "with tuned l1, L1-SGD is barely sparse, FOBOS is more accurate but less sparse "
            "than RDA, and FTRL-Proximal has RDA-like sparsity with FOBOS-like accuracy.",
            definitions,
            "\n".join(sentences),
            verdict_table(verdicts),
            "The frontiers compared pairwise at 21 log-spaced weight counts over the range both "
            "sweeps cover: the mean log-loss difference (negative: the first rule is lower) and "
            "the share of those counts at which the first rule is lower.",
            matched_table(compared),
            "<details><summary>Every sweep run</summary>\n\n"
            + sweep_table(outcomes, means)
            + "\n\n</details>",
        ]
    )
