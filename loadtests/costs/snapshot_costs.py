"""What a snapshot costs as the model grows: ``python -m loadtests.costs.snapshot_costs``.

On a fresh redis-server, a synthetic FTRL snapshot of N random features (the default layout,
2^18 buckets and 64 shards) is imported (``SnapshotImport``, fed from a generator, so the file
never exists whole), then exported again (``open_export(...).chunks()``, counted and dropped).
Printed per size: the file's size, wall-clock seconds of each, and the peak of Python memory
traced (``tracemalloc``) during each: what "streamed, bounded memory" means in numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import redis.asyncio as aioredis

from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.rules import get_rule
from online_ctr.learning.snapshot import MAX_ROWS, Footer, Header
from online_ctr.learning.snapshot_writer import Writer
from online_ctr.store.snapshot_export import open_export
from online_ctr.store.snapshot_import import SnapshotImport

SIZES = (250_000, 1_000_000)


def synthetic(features: int) -> Iterator[bytes]:
    """A valid FTRL snapshot of ``features`` random features, piece by piece."""
    rule = get_rule("ftrl")
    params = rule.params()
    rng = np.random.default_rng(0)
    writer = Writer()
    yield writer.start(Header("ftrl", dict(vars(params)), None, rule.fields, "synthetic"))
    nonzero = 0
    for first in range(0, features, MAX_ROWS):
        k = min(MAX_ROWS, features - first)
        ids = rng.integers(0, 2**63, k, dtype=np.uint64)  # distinct with near certainty
        state = np.column_stack((rng.standard_normal(k) * 2, rng.exponential(1.0, k)))
        nonzero += int(np.count_nonzero(rule.weights(state, 0, params)))
        yield writer.rows(ids, state)
    yield writer.finish(Footer(0, 0.0, nonzero, features))


async def _pieces(features: int) -> AsyncIterator[bytes]:
    for piece in synthetic(features):
        yield piece


async def measure(url: str, features: int) -> str:
    """Import then export a model of ``features``; one line of figures."""
    client = aioredis.Redis.from_url(url, socket_timeout=60)
    await client.flushall()
    tracemalloc.start()
    started = time.perf_counter()
    await SnapshotImport(client, "big", (1 << 18, 64)).run(_pieces(features))
    imported = time.perf_counter()
    import_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.reset_peak()
    size = 0
    async for piece in (await open_export(client, "big")).chunks():
        size += len(piece)
    exported = time.perf_counter()
    export_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    await client.aclose()
    return (
        f"model of {features:>10,} features: file {size / 1e6:6.1f} MB; "
        f"import {imported - started:6.1f} s, peak {import_peak / 1e6:5.1f} MB; "
        f"export {exported - imported:6.1f} s, peak {export_peak / 1e6:5.1f} MB"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as scratch,
        RedisServer(Path(scratch), persist=False) as server,
    ):
        for features in args.sizes:
            print(asyncio.run(measure(server.url, features)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
