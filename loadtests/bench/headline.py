"""The report's opening: every section's headline figures in one small table, each next to
its baseline measured in the same run and its target, with a short paragraph in plain words.

>>> predict = Headline(
...     "Single `/predict`", 7900.0, "requests/s",
...     "a bare FastAPI endpoint that parses the same body", 8500.0, Target(0.9, "ratio"),
... )
>>> row(predict)
['Single `/predict`', '7,900 requests/s', '0.93x a bare FastAPI endpoint that parses the same body (8,500 requests/s)', '>= 0.9x', 'met']
"""  # noqa: E501

from __future__ import annotations

import math
from collections.abc import Sequence

from loadtests.common.report import Headline, Target, table, verdict

HEADER = ["figure", "online-ctr", "baseline, same run", "target", "verdict"]


def number(value: float, unit: str = "") -> str:
    """A figure as people read it: thousands separators, a few significant digits.

    >>> number(123456.7, "examples/s"), number(46.53, "ms"), number(0.470788), number(2.5, "x")
    ('123,457 examples/s', '46.5 ms', '0.47079', '2.50 x')
    """
    if not math.isfinite(value):
        text = "n/a"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.5g}"
    return f"{text} {unit}" if unit else text


def target_text(target: Target | None, unit: str) -> str:
    """The target in a few symbols.

    >>> target_text(Target(0.9, "ratio"), "requests/s"), target_text(None, "ms")
    ('>= 0.9x', 'none')
    >>> target_text(Target(100, "value", at_most=True), "ms"), target_text(Target(2e-4, "gap"), "")
    ('<= 100 ms', 'within 0.0002')
    """
    if target is None:
        return "none"
    if target.on == "gap":
        return f"within {target.bound:g}"
    sign = "<=" if target.at_most else ">="
    if target.on == "ratio":
        return f"{sign} {target.bound:g}x"
    return f"{sign} {number(target.bound, unit)}"


def baseline_text(headline: Headline) -> str:
    """The baseline's name and figure, with ours as a ratio (or difference) to it."""
    h = headline
    if h.baseline_value is None:
        return h.baseline or "none"
    figure = number(h.baseline_value, h.unit)
    if h.broken:  # a broken model is compared with nothing
        return f"{h.baseline} ({figure})"
    if h.target is not None and h.target.on == "gap":
        return f"{h.baseline}: {figure} (ours {h.value - h.baseline_value:+.2g})"
    if h.baseline_value == 0 or not math.isfinite(h.baseline_value):
        return f"{h.baseline} ({figure})"
    return f"{h.value / h.baseline_value:.2f}x {h.baseline} ({figure})"


def verdict_text(headline: Headline) -> str:
    """``met``, ``NOT met``, ``not measured``, ``no target``, or why it is not judged."""
    if headline.broken:
        return f"broken: {headline.broken}"
    if headline.target is None:
        return "no target"
    return verdict(headline.target.met(headline.value, headline.baseline_value))


def row(headline: Headline) -> list[str]:
    """One line of the headline table."""
    ours = number(headline.value, headline.unit)
    if headline.note:
        ours += f" ({headline.note})"
    return [
        headline.what,
        ours,
        baseline_text(headline),
        target_text(headline.target, headline.unit),
        verdict_text(headline),
    ]


def headline_table(headlines: Sequence[Headline]) -> str:
    return table(HEADER, [row(h) for h in headlines]) if headlines else "No section ran."


def paragraph(headlines: Sequence[Headline]) -> str:
    """The opening words: what is compared with what, and how many targets this run met."""
    judged = [h for h in headlines if h.target is not None and not h.broken]
    met = [h for h in judged if verdict_text(h) == "met"]
    missed = [h.what for h in judged if verdict_text(h) != "met"]
    broken = [h.what for h in headlines if h.broken]
    words = [
        "online-ctr next to what a user would otherwise pick, every pair measured side by "
        "side in this one run on this machine: a bare FastAPI endpoint that parses the same "
        "request body and answers a constant (the framework's own ceiling for `/predict`), "
        "Vowpal Wabbit's native `--ftrl` and River's `FTRLProximal` learning the same Criteo "
        "rows, and a model that always predicts the running mean click rate (what any model "
        f"must beat). {len(met)} of {len(judged)} targets met."
    ]
    if missed:
        words.append(f"Not met, or not measured: {'; '.join(missed)}.")
    if broken:
        words.append(
            "Not compared, because a model in the comparison is broken (no better than "
            f"always predicting the mean, or without a nonzero weight): {'; '.join(broken)}."
        )
    words.append(
        "Absolute figures drift on a shared machine; the ratios compare figures taken side "
        "by side. The sections below give every run behind these figures; rerun them all with "
        "`make bench`, or one section with `python -m loadtests.bench --sections NAME`. The "
        "exact command, the machine and its load are at the end."
    )
    return " ".join(words)
