"""Cost against model size: ``python -m loadtests.bench.bench_scale`` (``make bench-scale``).

Fills one model, through the real API and worker, to each size in turn (default 100k, 1M and
10M tracked features) and measures there: the fill's rate, learning end to end, a worker's
drain, single and batch ``/predict``, Redis bytes per feature and the processes' RSS
(:mod:`loadtests.bench.scale`), each larger size side by side with a second service held at the
smallest size (:mod:`loadtests.bench.scale_run`). Prints a table row per size as it ends (and the
smallest size's row measured beside it), then the ratios of the largest size's figures to the
smallest's measured beside them, against their targets, and writes the report
(``docs/benchmarks-scale.md``) with a plot (``docs/img/scale.png`` beside it).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from loadtests.bench import memory_latency, scale_report
from loadtests.bench.run import command_line, machine
from loadtests.bench.scale import Scale, ScaleConfig, SizeResult
from loadtests.bench.scale_run import measure
from loadtests.common.plots import Curve, Panel, panels_figure
from loadtests.common.report import table
from testkit.paths import DATA_DIR, ROOT

MODULE = "loadtests.bench.bench_scale"
SIZES = (100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (10_000, 40_000)
SUFFIXES = {"k": 1_000, "m": 1_000_000}


def size(text: str) -> int:
    """A model size, with an optional ``k`` or ``M`` suffix.

    >>> size("100k"), size("10M"), size("2500")
    (100000, 10000000, 2500)
    """
    text = text.strip().lower().replace("_", "").replace(",", "")
    scale = SUFFIXES.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    try:
        value = round(float(number) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 100k, 1M)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a size must be positive, got {text!r}")
    return value


def sizes(text: str) -> tuple[int, ...]:
    """Comma-separated sizes, at least two different ones, in increasing order.

    >>> sizes("1M, 100k,1M")
    (100000, 1000000)
    """
    found = tuple(sorted({size(part) for part in text.split(",") if part.strip()}))
    if len(found) < 2:
        raise argparse.ArgumentTypeError("give at least two different sizes, e.g. 100k,1M")
    return found


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for trying it out")
    parser.add_argument("--sizes", type=sizes, help="features tracked (100k,1M,10M; quick 10k,40k)")
    parser.add_argument(
        "--examples", type=int, help="Criteo rows per timing (50,000; quick 10,000)"
    )
    parser.add_argument("--criteo-rows", type=int, help="head rows used (10,000; quick 500)")
    parser.add_argument("--duration-s", type=float, help="each /predict timing (10; quick 1)")
    parser.add_argument("--features-per-example", type=int, default=50, help="in the fill")
    parser.add_argument("--fill-window", type=int, help="timed fill features (50,000; quick 2,000)")
    parser.add_argument("--rounds", type=size, help="runs per median (3; quick 1)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks-scale.md")
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    quick = (QUICK_SIZES, 10_000, 500, 1.0, 2_000, 1)
    defaults = quick if args.quick else (SIZES, 50_000, 10_000, 10.0, 50_000, 3)
    names = ("sizes", "examples", "criteo_rows", "duration_s", "fill_window", "rounds")
    for name, default in zip(names, defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    return args


#: The plot's panels: title, y-axis label (one unit each), log y, and each curve's label and
#: field. Features/s and examples/s count different things, so they get a panel each.
PANELS = (
    (
        "Fill throughput",
        "throughput (features added/s, log scale)",
        True,
        {
            "fill, median of the timed windows": "fill_features_per_s",
            "bulk fill": "bulk_fill_features_per_s",
        },
    ),
    (
        "Learning and batch /predict throughput",
        "throughput (examples/s, log scale)",
        True,
        {
            "learned end to end": "learned_examples_per_s",
            "worker-only drain": "drain_examples_per_s",
            "batch /predict": "batch_examples_per_s",
        },
    ),
    (
        "Single /predict latency, sequential",
        "latency (ms)",
        False,
        {"p50": "predict_p50_ms", "p99": "predict_p99_ms"},
    ),
    (
        "Redis memory",
        "Redis memory (bytes per tracked feature)",
        False,
        {"used_memory growth / features tracked": "redis_bytes_per_feature"},
    ),
    (
        "Process memory",
        "resident set, VmRSS (MiB)",
        False,
        {"worker": "worker_rss_mib", "API": "api_rss_mib"},
    ),
)


def plot(scale: Scale, path: Path) -> Path:
    """Every figure against features tracked (log x), one panel per unit."""
    return plot_rows([dataclasses.asdict(r) for r in scale.results], scale.tool, path)


def plot_rows(rows: Sequence[Mapping[str, float]], tool: str, path: Path) -> Path:
    """:func:`plot` from each size's figures by :class:`SizeResult` field (a run's, or those
    :func:`scale_report.sizes_table` reads back from its report)."""
    x = [float(r["tracked"]) for r in rows]
    panels = [
        Panel(
            title,
            y_label,
            [Curve(label, label, x, [r[key] for r in rows]) for label, key in curves.items()],
            log_y,
        )
        for title, y_label, log_y, curves in PANELS
    ]
    title = f"Cost against model size (/predict timed with {tool})"
    return panels_figure(path, title, "model size (features tracked, log scale)", panels)


def about_run(argv: Sequence[str]) -> dict[str, str]:
    """Date, command, machine and load average at the start."""
    about = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}
    about["command"] = f"`{command_line(argv, MODULE)}`"
    about.update(machine())
    about["load average at start (1 min)"] = f"{os.getloadavg()[0]:.2f}"
    about["random load latency at start"] = memory_latency.describe()
    return about


def print_rows(result: SizeResult, beside: SizeResult | None) -> None:
    """A size's table line, then the smallest size's measured beside it, if any."""
    print(scale_report.row_line(result), flush=True)
    if beside is not None:
        print(
            scale_report.row_line(beside, f"{beside.target:,} beside {result.target:,}"), flush=True
        )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    config = ScaleConfig(
        args.sizes,
        args.examples,
        args.criteo_rows,
        args.duration_s,
        args.features_per_example,
        args.fill_window,
        args.data_dir,
        args.rounds,
    )
    about = about_run(argv)
    started = time.perf_counter()
    print(table(scale_report.HEADER, []), flush=True)
    scale = measure(config, print_rows)
    about["load average at end (1 min)"] = f"{os.getloadavg()[0]:.2f}"
    about["random load latency at end"] = memory_latency.describe()
    about["duration"] = f"{(time.perf_counter() - started) / 60:.1f} min"
    found = scale_report.ratios(scale.alongside[-1], scale.results[-1])
    print("\n" + scale_report.ratio_table(found), flush=True)
    report_dir = args.out.resolve().parent
    image = plot(scale, report_dir / "img" / "scale.png")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    kept = scale_report.kept_sections(args.out.read_text()) if args.out.exists() else ""
    args.out.write_text(scale_report.render(scale, config, about, found, image, report_dir, kept))
    print(f"report written to {args.out}, plot to {image}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
