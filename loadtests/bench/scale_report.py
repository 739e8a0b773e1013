"""The scale benchmark's output: its table rows, ratio table, plot and Markdown report."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadtests.bench.scale import MIB, Scale, ScaleConfig, SizeResult
from loadtests.bench.scale_client import (
    BODY_EXAMPLES,
    MAX_LAG_ENTRIES,
    POLL_S,
    WINDOW_BODY_EXAMPLES,
)
from loadtests.common.report import Cell, figure, table, verdict
from online_ctr.config.settings import Settings
from online_ctr.store.layout import Layout

#: Sections other commands write into the report (``python -m loadtests.costs.compact_cost``'s
#: figures): a new report keeps them from the previous one.
KEPT = ("## Spread across runs", "## Compact state encoding")

#: The table's columns: header, and the :class:`SizeResult` field shown.
COLUMNS = {
    "target features": "target",
    "features tracked": "tracked",
    "bulk fill features/s": "bulk_fill_features_per_s",
    "fill features/s": "fill_features_per_s",
    "learned ex/s": "learned_examples_per_s",
    "drain ex/s": "drain_examples_per_s",
    "/predict p50 ms": "predict_p50_ms",
    "/predict p99 ms": "predict_p99_ms",
    "batch /predict ex/s": "batch_examples_per_s",
    "Redis bytes/feature": "redis_bytes_per_feature",
    "worker RSS MiB": "worker_rss_mib",
    "API RSS MiB": "api_rss_mib",
    "load (1 min)": "load_1min",
    "Redis us/HGET": "hget_us",
    "Redis us/HSET": "hset_us",
    "HGETs/feature": "hgets_per_feature",
    "Redis CPU us/feature": "redis_cpu_us",
    "API CPU us/feature": "api_cpu_us",
    "worker CPU us/feature": "worker_cpu_us",
}
HEADER = list(COLUMNS)
#: Figures whose ratio has a target: at least 0.8 (throughputs) or at most 1.25 (latency).
TARGETS = {
    "fill_features_per_s": ("fill, features/s", ">=", 0.8),
    "learned_examples_per_s": ("learned end to end, examples/s", ">=", 0.8),
    "drain_examples_per_s": ("worker-only drain, examples/s", ">=", 0.8),
    "batch_examples_per_s": ("batch /predict, examples/s", ">=", 0.8),
    "predict_p99_ms": ("single /predict p99, ms", "<=", 1.25),
}
#: The worker cache's size the benchmark's services run with (they set no other).
CACHE_DEFAULT: int = Settings.model_fields["worker_cache_features"].default
_BUCKETS: int = Settings.model_fields["state_buckets"].default
_SHARDS: int = Settings.model_fields["state_shards"].default
#: Bytes of a model's existence filters at the default layout (made with the model).
FILTERS = Layout(_BUCKETS, _SHARDS, 64, 2).filter_bytes * _SHARDS
#: Figures whose runs the runs table lists: the judged ones, and learning's first run after
#: the fill (a warm-up, in no median).
ROUNDS = {
    "learned_first_examples_per_s": "learned end to end, first run after the fill (a warm-up)",
    **{key: name for key, (name, _, _) in TARGETS.items()},
}
#: Figures whose ratio is shown without a target.
SHOWN = {
    "bulk_fill_features_per_s": "bulk fill (before the timed windows), features/s",
    "predict_p50_ms": "single /predict p50, ms",
    "redis_bytes_per_feature": "Redis bytes per tracked feature",
    "worker_rss_mib": "worker RSS, MiB",
    "api_rss_mib": "API RSS, MiB",
    "hget_us": "Redis microseconds per HGET in the fill windows",
    "hset_us": "Redis microseconds per HSET in the fill windows",
    "hgets_per_feature": "HGETs per feature added in the fill windows",
    "redis_cpu_us": "Redis CPU microseconds per feature added in the fill windows",
    "api_cpu_us": "API CPU microseconds per feature added in the fill windows",
    "worker_cpu_us": "worker CPU microseconds per feature added in the fill windows",
}


@dataclass(frozen=True)
class Ratio:
    """A figure at the largest size over the same figure at the smallest, and its target
    (empty: shown without one)."""

    name: str
    smallest: float
    largest: float
    target: str = ""

    @property
    def ratio(self) -> float:
        return self.largest / self.smallest if self.smallest else math.nan

    @property
    def met(self) -> bool | None:
        """None without a target, or when a figure is missing (not finite).

        >>> Ratio("x", 10.0, 8.0, ">= 0.8").met, Ratio("x", 1.0, 1.3, "<= 1.25").met
        (True, False)
        """
        if not self.target or not math.isfinite(self.ratio):
            return None
        sign, bound = self.target.split()
        return self.ratio >= float(bound) if sign == ">=" else self.ratio <= float(bound)


def ratios(smallest: SizeResult, largest: SizeResult, shown: bool = True) -> list[Ratio]:
    """``largest`` over ``smallest``, for every figure with a target, then (if ``shown``)
    the others."""
    found = [
        Ratio(name, getattr(smallest, key), getattr(largest, key), f"{sign} {bound:g}")
        for key, (name, sign, bound) in TARGETS.items()
    ]
    if shown:
        found += [
            Ratio(name, getattr(smallest, key), getattr(largest, key))
            for key, name in SHOWN.items()
        ]
    return found


def row(result: SizeResult, label: str = "") -> list[Cell]:
    """One size's cells, in :data:`HEADER` order; ``label`` in place of its size if given."""
    cells: list[Cell] = [getattr(result, name) for name in COLUMNS.values()]
    return [label, *cells[1:]] if label else cells


def row_line(result: SizeResult, label: str = "") -> str:
    """One size's Markdown table line, to print under the header as the run goes."""
    return table(HEADER, [row(result, label)], digits=2).splitlines()[-1]


def beside_rows(scale: Scale) -> list[list[Cell]]:
    """The smallest size's rows measured beside each larger size, labelled by that size."""
    larger = scale.results[1:]
    return [
        row(r, f"{r.target:,} beside {at.target:,}")
        for r, at in zip(scale.alongside, larger, strict=True)
    ]


def unpaired(scale: Scale) -> list[Ratio]:
    """The targets' ratios of the largest size to the smallest size's first row."""
    return ratios(scale.results[0], scale.results[-1], shown=False)


def ratio_table(ratios: Sequence[Ratio], judged: bool = True) -> str:
    """Largest size over smallest, each with its target and (if ``judged``) verdict."""
    rows: list[list[Cell]] = [
        [
            r.name,
            r.smallest,
            r.largest,
            r.ratio,
            r.target or "none (shown)",
            *([verdict(r.met) if r.target else ""] if judged else []),
        ]
        for r in ratios
    ]
    header = ["figure", "smallest size", "largest size", "largest / smallest", "target"]
    return table([*header, *(["verdict"] if judged else [])], rows, digits=2)


def rounds_table(scale: Scale) -> str:
    """Per size (and the smallest beside each larger one), the runs behind each median."""
    labelled = [(f"{r.target:,}", r) for r in scale.results[:1]]
    for beside, at in zip(scale.alongside, scale.results[1:], strict=True):
        labelled += [(f"{beside.target:,} beside {at.target:,}", beside), (f"{at.target:,}", at)]
    rows: list[list[Cell]] = [
        [label, name, ", ".join(_run(x) for x in r.rounds[key])]
        for key, name in ROUNDS.items()
        for label, r in labelled
        if key in r.rounds
    ]
    return table(["target features", "figure", "runs (the table shows their median)"], rows)


def _run(value: float) -> str:
    """A run's figure as the tables show it: whole numbers from 100 up.

    >>> _run(123456.7), _run(0.8349)
    ('123,457', '0.83')
    """
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def short_windows(scale: Scale, config: ScaleConfig) -> str:
    """A sentence naming the sizes whose timed fill was smaller than the window, if any."""
    short = [r for r in scale.results if r.fill_window < config.fill_window]
    if not short:
        return ""
    listed = ", ".join(f"{r.fill_window:,} at {r.target:,}" for r in short)
    return f" The timed part was shorter where the whole fill was: {listed} features."


def method(scale: Scale, config: ScaleConfig) -> str:
    """What each column includes."""
    predict = (
        "`wrk` (1 thread, 1 connection: one request at a time), p50/p99 from its histogram"
        if scale.tool == "wrk"
        else "httpx, one request at a time on a keep-alive connection, nearest-rank "
        "percentiles of the client-side times (httpx's own overhead included)"
    )
    bodies = math.ceil(config.examples / BODY_EXAMPLES)
    return "\n".join(
        [
            "- **Two services, in turns**: each its own Redis, API and worker (the same "
            "settings). The *reference* holds its model at the smallest size; the other's "
            "model is grown size after size. The smallest size is measured first on the "
            "reference alone (the first row); at each larger size, every timing below is run "
            "on both services in turns, the reference first in odd rounds and second in even "
            "ones, so that the smallest size's figures beside it come from the same minutes "
            "(the machine's speed drifts from minute to minute: see Spread across runs). The "
            "targets judge the largest size against the smallest size measured beside it.",
            f"- **Model**: each model first learned the first {config.criteo_rows:,} Criteo "
            f"rows once ({scale.warm_up_features:,} features tracked), so `/predict` reads "
            "real state and the timed Criteo posts add no features. `features tracked` is "
            "`features_tracked` of `GET /models/default` after the fill; it includes those "
            "Criteo features.",
            f"- **bulk fill, fill features/s**: `/learn` bodies whose examples each carry "
            f"{config.per_example} features never seen before. The bulk of the fill (bodies of "
            f"{BODY_EXAMPLES:,} examples) stops {config.rounds} windows of "
            f"{config.fill_window:,} features short of the size (fewer where the size leaves "
            "no room for them, after the Criteo features); once the worker has learned "
            "it and applied its last commit to the shards (its redo entry's shards all say "
            f"so), each window is posted in bodies of {WINDOW_BODY_EXAMPLES} examples and "
            "timed on its own, the next one once the worker has applied it (`fill "
            "features/s`, the figure judged, is the median of the windows: the same work at "
            "every size, from an idle worker). The reference instead starts its model again "
            "before each of its windows (`DELETE /models/default`, the Criteo rows learned "
            f"again, a fill to {config.fill_window:,} features short of its size, untimed), "
            "so that each of its windows ends at the smallest size; its bulk fill figure is "
            "that last fill's. Each window: "
            "features added over the seconds from the first post until the worker had "
            "learned them all, this process building the bodies meanwhile on the same cores "
            f"and pausing while more than {MAX_LAG_ENTRIES} bodies await the worker (which "
            f"keeps the stream short).{short_windows(scale, config)}",
            f"- **learned ex/s**: after the fill's last apply too, {bodies:,} bodies of "
            f"{BODY_EXAMPLES:,} Criteo rows posted "
            "one after another, from the first post until `global_step` shows them all "
            f"learned (polled every {POLL_S * 1e3:.0f} ms); the median of {config.rounds} "
            "such runs, each after the last one's apply. Before them, one such run on each "
            "service warms its worker's cache (its figure is in the runs table, in no "
            "median): a fill larger than the cache (`OCTR_WORKER_CACHE_FEATURES`, "
            f"{CACHE_DEFAULT:,} features by default) pushes the Criteo features out of it, "
            "one within it does not, and the timings compare warm caches; the drain compares "
            "cold ones.",
            "- **drain ex/s**: the worker stopped (SIGTERM, it finishes its batch and exits), "
            f"the same {bodies * BODY_EXAMPLES:,} rows posted, then a new worker started: the rows "
            "over the time from when it holds the model's lease (so the process's start, "
            "imports and first connection, which a running worker does not pay, are left out; "
            "its recovery and cold cache are in) until `global_step` shows them all learned; "
            f"the median of {config.rounds} such runs.",
            f"- **/predict p50/p99**: single Criteo-row bodies, {predict}, "
            f"{config.duration_s:g} s after a warm-up of {min(config.duration_s, 3.0):g} s; "
            f"the medians of {config.rounds} such runs' p50 and p99.",
            f"- **batch /predict ex/s**: bodies of {BODY_EXAMPLES:,} Criteo rows, one request "
            f"at a time ({scale.tool}), {config.duration_s:g} s; requests/s x {BODY_EXAMPLES:,}; "
            f"the median of {config.rounds} runs.",
            "- **Redis us/HGET, us/HSET**: Redis's own microseconds per call of each command "
            "in the timed fill windows (`INFO commandstats`), the calls the bucket scripts make "
            "(a read of each new feature, then its write). A call costs more once the keyspace "
            "outgrows the CPU's caches: the key's dictionary entry, name, object and listpack "
            "are each a memory access that misses. **HGETs/feature**: calls per feature added: "
            "the new features whose bit in their shard's existence filter was set (another "
            "feature's), which the learner reads; it skips the others.",
            "- **Redis, API, worker CPU us/feature**: each process's CPU time (`/proc/<pid>/stat`, "
            "in clock ticks of 10 ms) over the timed fill windows and the waits between them, "
            "per feature added: where a larger size's extra time goes.",
            "- **Redis bytes/feature**: growth of `INFO memory` `used_memory` from the empty "
            f"model ({scale.baseline_bytes / MIB:.1f} MiB, API and worker up) to right after "
            "the fill, over `features_tracked`: everything Redis holds counts but what the "
            "model holds from its start at any size: its existence filters, "
            f"{FILTERS / MIB:.0f} MiB at the default layout, made with it "
            f"({FILTERS / 1e7:.2f} bytes a feature more at 10M).",
            "- **worker RSS, API RSS**: `VmRSS` of `/proc/<pid>/status` right after the "
            "learned ex/s timing; the worker is the one that did the fill and that timing.",
            "- **load**: the machine's 1-minute load average when the size's row ended (2 "
            "cores, shared with other engineers' work: absolute figures drift).",
            "- **random load latency** (this run's table, at its start and end): nanoseconds "
            "per dependent random load over an 8 MiB and a 256 MiB block "
            "(`python -m loadtests.bench.memory_latency`, a pointer chase): what the shared caches "
            "and main memory gave while the run ran. The large sizes pay the second on nearly "
            "every Redis key they touch; both swing with the neighbours' work.",
        ]
    )


def kept_sections(previous: str) -> str:
    """The sections of a previous report named in :data:`KEPT`, as they were."""
    parts = re.split(r"(?m)^(?=## )", previous)
    return "".join(part for part in parts if part.startswith(KEPT)).strip()


def render(
    scale: Scale,
    config: ScaleConfig,
    about: Mapping[str, str],
    ratios: Sequence[Ratio],
    image: Path,
    report_dir: Path,
    kept: str = "",
) -> str:
    """The whole report, ending with the ``kept`` sections; links relative to ``report_dir``."""
    return (
        "\n\n".join(
            [
                "# Benchmark: cost against model size",
                "Generated by `make bench-scale`; do not edit by hand (its last sections, "
                f"{', '.join(h.lstrip('# ') for h in KEPT)}, come from their own commands and "
                "are kept).",
                table(["this run", ""], list(about.items())),
                "## Method",
                method(scale, config),
                "## Figures at each size",
                table(HEADER, [row(r) for r in scale.results], digits=2),
                "The smallest size again, measured on the reference service in turns with "
                "each larger size's timings:",
                table(HEADER, beside_rows(scale), digits=2),
                "## Largest size over smallest",
                "Targets: every throughput at the largest size at least 0.8x its value at "
                "the smallest; single `/predict` p99 at most 1.25x. The smallest size's "
                "figures are the ones measured beside the largest size's, in the same minutes.",
                ratio_table(ratios),
                "The same targets against the smallest size's first row, measured alone "
                "minutes earlier (shown, not judged: the machine's speed drifts between "
                "minutes, which the turns cancel):",
                ratio_table(unpaired(scale), judged=False),
                "## Runs behind the medians",
                rounds_table(scale),
                figure(image, "Cost against model size", report_dir),
                *([kept] if kept else []),
            ]
        )
        + "\n"
    )


def sizes_table(report: str) -> list[dict[str, float]]:
    """The figures at each size as a report's first table gives them, by :class:`SizeResult`
    field: what :func:`loadtests.bench.bench_scale.plot_rows` draws, read back from the report.

    >>> text = "## Figures at each size\\n\\n" + table(HEADER, [[1_000, 2_000, *[0.5] * 17]])
    >>> row = sizes_table(text)[0]
    >>> row["target"], row["tracked"], row["worker_cpu_us"]
    (1000.0, 2000.0, 0.5)
    """
    section = report.split("## Figures at each size", 1)[1]
    lines = section.strip().splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip().replace(",", "") for cell in line.strip("|").split("|")]
        values = zip(header, cells, strict=True)
        rows.append({COLUMNS[name]: _number(cell) for name, cell in values})
    return rows


def _number(cell: str) -> float:
    """A table cell's number; a missing figure (``n/a``) is not a number."""
    return math.nan if cell == "n/a" else float(cell)


def timing_tool(report: str) -> str:
    """The tool that timed ``/predict`` in a report's run, as its method names it."""
    return "wrk" if "`wrk` (1 thread" in report else "httpx"
