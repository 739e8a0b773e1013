"""The churn benchmark runs for real on a short stream: the model that keeps every feature
grows with it, the one with expire_after stops growing, and the report and figure are made
(no timings are asserted)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from loadtests.bench import quarter
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.readers import read_examples
from testkit.paths import CRITEO


def test_a_short_quarter(redis_url: str, tmp_path: Path) -> None:
    rows = list(itertools.islice(read_examples(CRITEO, "criteo"), 2_000))
    base = FeatureHasher().batch([x for x, _ in rows], [y for _, y in rows])
    examples = 20_000
    options = (("all", "all", 0, 0), ("expire", "all", 1_000, 0), ("budget", "all", 0, 5_000))
    results = {
        name: asyncio.run(
            quarter.run_option(redis_url, base, admission, span, examples, 1 << 12, most)
        )
        for name, admission, span, most in options
    }
    kept, expired, budget = results["all"], results["expire"], results["budget"]
    assert [p.examples for p in kept] == [2_000 * (i + 1) for i in range(10)]
    assert all(a.features < b.features for a, b in itertools.pairwise(kept))
    assert quarter.plateau(kept) > 2.0  # it grows with the stream
    assert quarter.plateau(expired) < 1.3 and expired[-1].features < kept[-1].features / 3
    # The budget holds at most its features and those of one bin of 64 examples.
    assert quarter.plateau(budget) < 1.3
    assert all(p.features <= 5_000 + 64 * 40 for p in budget)
    text = quarter.report(results, examples, "img/x.png")
    assert "| all |" in text and "| expire |" in text and "![" in text
    assert quarter.draw(results, tmp_path / "x.png").stat().st_size > 0
