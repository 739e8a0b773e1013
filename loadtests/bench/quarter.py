"""A quarter of churn in minutes: Redis bytes per model over a stream whose ids keep changing,
with and without bounds. ``python -m loadtests.bench.quarter`` (``make bench-quarter``) prints the
report and writes it to ``docs/benchmarks-quarter.md``, with its figure.

**The stream.** The Criteo head's rows again and again, as a real service meets them: a share
:data:`CHURNING` of the categorical ids (chosen by a hash of the id) are renamed every
:data:`LIFETIME` examples, each at its own phase, so that new ids arrive at a steady rate and
the ones they replace are never seen again (a creative retired, a user gone); the rest keep
their name for good (a site, a device type). Without bounds the model's distinct features grow
linearly with the stream, past 50M here (about 11 new ones an example).

**The models.** FTRL at the service's defaults, each in a fresh Redis: keeping every feature;
``expire_after`` :data:`SPAN`; Bloom admission ``bloom:2``; the same with its counts halved
every :data:`HALVE_EVERY` examples; that and ``expire_after`` both; a feature budget of
:data:`BUDGET` features (``max_features``); each of :data:`BUCKETS`
buckets. The stream goes to the model's Redis stream in entries of :data:`ENTRY` examples
(as ``/learn`` writes them) a tenth at a time, and a real worker (the service's ``Worker``,
in this process) learns each tenth before the next is sent. After each tenth: the model's
state bytes (``MEMORY USAGE`` of its buckets, :mod:`online_ctr.store.state_bytes`), its
features held (a budget's count; the features tracked, for the others), its progressive log
loss, and the worker's examples learned per second over that tenth.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from loadtests.common.feed import criteo_rows
from loadtests.common.report import table
from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.features import BIAS, Batch, FeatureHasher
from online_ctr.learning.rules import get_rule
from online_ctr.learning.splitmix import mix, uniform
from online_ctr.metrics import Metrics
from online_ctr.store.codec import encode_entry
from online_ctr.store.state import ModelStore, spec_from
from online_ctr.store.state_bytes import state_bytes
from testkit.paths import DATA_DIR, ROOT
from workers.learner_loop import Worker, WorkerConfig

REPORT = ROOT / "docs" / "benchmarks-quarter.md"
FIGURE = ROOT / "docs" / "img" / "quarter-bytes.png"
#: Share of the categorical ids that churn, and how many examples one of their names lives.
CHURNING = 0.75
LIFETIME = 100
#: Examples in the stream, per stream entry, and the expiry span the bounded models use.
EXAMPLES = 5_000_000
ENTRY = 500
SPAN = 100_000
TENTHS = 10
#: The Bloom admission's halving period: about 220,000 new ids (11 an example) between two
#: halvings, 3 counters each, leave most of the 4,194,304 counters free.
HALVE_EVERY = 20_000
FORGETTING = f"bloom:2:{HALVE_EVERY}"
#: The feature budget's size: about what ``expire_after`` :data:`SPAN` holds here.
BUDGET = 1_000_000
#: The models compared: name, admission, expire_after, max_features.
OPTIONS = (
    ("keep every feature", "all", 0, 0),
    (f"expire_after {SPAN:,}", "all", SPAN, 0),
    ("bloom:2", "bloom:2", 0, 0),
    (FORGETTING, FORGETTING, 0, 0),
    (f"{FORGETTING} + expire_after {SPAN:,}", FORGETTING, SPAN, 0),
    (f"max_features {BUDGET:,}", "all", 0, BUDGET),
)
#: Buckets of every model: 2^20, so that at 50M features a bucket holds about 50, within the
#: 128 fields of a compact listpack (at 2^18 the unbounded model's buckets would outgrow it).
BUCKETS = 1 << 20
#: Salts of the churn's two hashes: which ids churn and at which phase, and their new names.
_CHOSEN, _RENAMED = np.uint64(0x636875726E), np.uint64(0x6E616D65)


def churned(batch: Batch, start: int, bias: int) -> Batch:
    """``batch`` as examples ``start``.. of the churning stream: each churning id (a share
    :data:`CHURNING`, the bias never) renamed for the lifetime its step falls in, at a phase
    of its own.

    >>> ids = np.arange(1, 2001, dtype=np.uint64)
    >>> one = Batch(np.array([0, 2000]), ids, np.ones(2000), np.zeros(1))
    >>> a, b = churned(one, 0, 0).ids, churned(one, LIFETIME, 0).ids
    >>> bool(0.7 < np.mean(a != ids) < 0.8)  # about three in four ids churn
    True
    >>> np.array_equal(a == ids, b == ids), bool((a != b).any())  # the same ones, renamed
    (True, True)
    """
    ids = batch.ids
    chosen = uniform(mix(ids ^ _CHOSEN))
    churning = (chosen < CHURNING) & (ids != np.uint64(bias))
    steps = start + batch.rows()
    lifetime = ((steps + chosen * LIFETIME) // LIFETIME).astype(np.uint64)
    renamed = mix(ids ^ mix(lifetime ^ _RENAMED))
    return Batch(batch.indptr, np.where(churning, renamed, ids), batch.values, batch.labels)


def stream(base: Batch, first: int, count: int, bias: int) -> Iterator[bytes]:
    """Entries of :data:`ENTRY` examples for examples ``first`` to ``first + count`` of the
    churning stream (``base`` repeated)."""
    for start in range(first, first + count, ENTRY):
        at = start % len(base)
        part = base.examples(at, min(at + ENTRY, len(base)))
        yield encode_entry(churned(part, start, bias))


@dataclass(frozen=True)
class Point:
    """The model after a tenth of the stream."""

    examples: int
    state_bytes: int
    features: int
    logloss: float
    per_second: float


async def run_option(
    url: str,
    base: Batch,
    admission: str,
    expire_after: int,
    examples: int,
    buckets: int = BUCKETS,
    max_features: int = 0,
) -> list[Point]:
    """Feed and learn ``examples`` of the stream a tenth at a time (see the module doc)."""
    client = aioredis.Redis.from_url(url, socket_timeout=600)  # a commit of 700k new features
    await client.flushall()
    params = get_rule("ftrl").params()
    spec = spec_from(
        "default",
        "ftrl",
        params,
        None,
        buckets,
        admission=admission,
        expire_after=expire_after,
        max_features=max_features,
    )
    store = ModelStore(client, spec)
    await store.ensure()
    worker = Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry()))
    bias = FeatureHasher().id(BIAS)
    points, tenth = [], examples // TENTHS
    try:
        for part in range(TENTHS):
            for chunk in _chunks(stream(base, part * tenth, tenth, bias), 200):
                async with client.pipeline(transaction=False) as pipe:
                    for blob in chunk:
                        pipe.xadd(store.keys.stream, {"b": blob})
                    await pipe.execute()
            started = time.perf_counter()
            await worker.run_until_idle()
            seconds = time.perf_counter() - started
            info = await store.info()
            held = await state_bytes(client, store.keys, spec.layout, info.features_tracked)
            assert info.progressive_logloss is not None
            point = Point(
                info.t, held.total, info.features_held, info.progressive_logloss, tenth / seconds
            )
            points.append(point)
            print(_line(point), flush=True)
    finally:
        await client.aclose()
    return points


def _line(point: Point) -> str:
    mib = point.state_bytes / 2**20
    return f"  {point.examples:>10,} examples: {mib:9.1f} MiB, {point.features:>11,} features, "\
        f"{point.per_second:,.0f}/s, log loss {point.logloss:.5f}"  # fmt: skip


def _chunks(blobs: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for blob in blobs:
        chunk.append(blob)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def plateau(points: list[Point]) -> float:
    """Bytes at the end over bytes at one fifth of the stream."""
    return points[-1].state_bytes / points[TENTHS // 5 - 1].state_bytes


def report(results: dict[str, list[Point]], examples: int, figure: str) -> str:
    rows = []
    for name, points in results.items():
        rows.append(
            [
                name,
                f"{points[TENTHS // 5 - 1].state_bytes / 2**20:,.1f}",
                f"{points[-1].state_bytes / 2**20:,.1f}",
                f"{plateau(points):.2f}x",
                f"{points[-1].features:,}",
                "not logged" if math.isnan(points[-1].logloss) else f"{points[-1].logloss:.5f}",
                f"{np.median([p.per_second for p in points]):,.0f}",
            ]
        )
    header = ["model", "MiB at 1/5", "MiB at end", "end / (1/5)", "features at end"]
    header += ["log loss", "examples/s (median tenth)"]
    per_tenth = [
        [f"{(i + 1) * examples // TENTHS:,}"]
        + [f"{results[name][i].state_bytes / 2**20:,.1f}" for name in results]
        for i in range(TENTHS)
    ]
    return "\n".join(
        [
            "# A quarter of churn: Redis bytes per model, with and without bounds",
            "",
            "Measured with `make bench-quarter` (`python -m loadtests.bench.quarter`) on a 2-core",
            "machine; what the stream and the models are: the module's docstring. In short: the",
            f"Criteo head's rows, {examples:,} examples, {CHURNING:.0%} of the categorical ids",
            f"renamed every {LIFETIME:,} examples at a phase of their own; FTRL at the defaults,",
            "2^20 buckets.",
            "",
            table(header, rows),
            "",
            "The target: with a bound set, bytes at the end at most 1.1 times the bytes at one",
            "fifth of the stream; without, growing with the stream.",
            "",
            f"![Redis bytes per model over the stream]({figure})",
            "",
            "Bytes per model (MiB) after each tenth of the stream:",
            "",
            table(["examples", *results], per_tenth),
            "",
        ]
    )


def draw(results: dict[str, list[Point]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from loadtests.common.readable import save

    figure, axis = plt.subplots(figsize=(7, 4.4))
    for name, points in results.items():
        x = [p.examples / 1e6 for p in points]
        axis.plot(x, [p.state_bytes / 2**20 for p in points], marker="o", label=name)
    axis.set_title("Redis bytes of the model's state under churn")
    axis.set_xlabel("examples learned (millions)")
    axis.set_ylabel("state in Redis (MiB)")
    axis.legend(loc="upper left")
    axis.grid(alpha=0.3)
    try:
        return save(figure, path)
    finally:
        plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=EXAMPLES)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--models", type=int, default=len(OPTIONS), help="run only the first N models"
    )
    parser.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="run only the model NAME (repeatable; printed, not written)",
    )
    parser.add_argument(
        "--buckets",
        type=int,
        default=BUCKETS,
        help=f"buckets of every model (default {BUCKETS}; another is printed, not written)",
    )
    args = parser.parse_args()
    chosen = [o for o in OPTIONS[: args.models] if not args.only or o[0] in args.only]
    if not chosen:
        parser.error(f"--only: no model of that name; the models: {[o[0] for o in OPTIONS]}")
    # The report describes the default models and layout: another choice is printed only.
    write = not (args.no_write or args.only or args.buckets != BUCKETS)
    rows = criteo_rows(args.data_dir)
    base = FeatureHasher().batch([x for x, _ in rows], [y for _, y in rows])
    results: dict[str, list[Point]] = {}
    with tempfile.TemporaryDirectory(prefix="octr-quarter-") as work:
        server = RedisServer(Path(work) / "redis", persist=False)
        server.start()
        try:
            for name, admission, expire_after, max_features in chosen:
                print(f"{name} ...", flush=True)
                results[name] = asyncio.run(
                    run_option(
                        server.url,
                        base,
                        admission,
                        expire_after,
                        args.examples,
                        args.buckets,
                        max_features,
                    )
                )
                if write:  # after each model: a run stopped keeps what it measured
                    publish(results, args.examples)
        finally:
            server.stop()
    print(report(results, args.examples, FIGURE_LINK))


#: Where the report links its figure.
FIGURE_LINK = "img/quarter-bytes.png"


def publish(results: dict[str, list[Point]], examples: int) -> None:
    """Write the report and its figure."""
    draw(results, FIGURE)
    REPORT.write_text(report(results, examples, FIGURE_LINK))


if __name__ == "__main__":
    main()
