"""Draw the benchmarks' figures again from the data their runs kept, without running them:
``python -m loadtests.bench.replot``. The quality figures come from ``docs/img/quality-runs.json``
(written by the quality section), the scale figure from the table of figures at each size in
``docs/benchmarks-scale.md``. A figure whose data is missing is named on stderr and skipped."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from loadtests.bench import quality, quality_data, scale_report
from loadtests.bench.bench_scale import plot_rows
from testkit.paths import ROOT


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.replot", description=__doc__)
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="reports' folder")
    args = parser.parse_args(argv)
    img_dir = args.docs / "img"
    drawn: list[Path] = []
    if (img_dir / quality_data.NAME).exists():
        drawn += quality.draw(quality_data.load(img_dir), img_dir).values()
    else:
        print(f"replot: no {img_dir / quality_data.NAME}: run the quality section", file=sys.stderr)
    report = args.docs / "benchmarks-scale.md"
    if report.exists():
        text = report.read_text()
        rows = scale_report.sizes_table(text)
        drawn.append(plot_rows(rows, scale_report.timing_tool(text), img_dir / "scale.png"))
    else:
        print(f"replot: no {report}: run make bench-scale", file=sys.stderr)
    for path in drawn:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
