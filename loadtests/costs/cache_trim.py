"""How long the learner's cache stops learning to trim itself:
``python -m loadtests.costs.cache_trim``.

A worker's cache (:class:`workers.cache.StateCache`) holds at most ``--features`` features
(``OCTR_WORKER_CACHE_FEATURES``, 2,000,000 by default); past it, the least recently used half goes,
while the learner waits. Here a cache is filled with random features in groups of 5,000 (one
``update`` each, as commits do) until it passes the bound, then trimmed, ``--repeats`` times:
printed, each trim's milliseconds, then the same for a *rebuild* baseline measured in the same
run, the kept half put into a new table of ``max_features`` rows (how trims were done before
:meth:`online_ctr.learning.table.StateTable.keep`). The ratio is baseline over trim. No targets.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np

from online_ctr.cli.args import integer
from online_ctr.learning.table import StateTable, warm_up
from workers.cache import StateCache

GROUP = 5_000


def rebuild(cache: StateCache) -> None:
    """The baseline: the most recently used half copied into a new table of the bound's size."""
    table, size, keep = cache.table, len(cache.table), cache.max_features // 2
    newest = np.argpartition(table.data[:size, cache.width + 1], size - keep)[size - keep :]
    ids, data = table.ids[newest].copy(), table.data[newest].copy()
    cache.table = StateTable(cache.width + 2, max(cache.max_features, 1024))
    cache.table.data[cache.table.rows(ids, create=True)] = data


def timings(features: int, repeats: int, trim: Callable[[StateCache], None]) -> list[float]:
    """Seconds of each of ``repeats`` trims of a cache of ``features`` filled past its bound."""
    rng = np.random.default_rng(0)
    cache, seconds = StateCache(width=2, max_features=features), []
    for _ in range(repeats):
        while len(cache) <= features:
            ids = rng.integers(0, 2**64 - 1, GROUP, dtype=np.uint64, endpoint=True)
            rows = cache.insert(ids, np.zeros((GROUP, 2)), np.zeros(GROUP, np.bool_))
            cache.update(rows, np.ones((GROUP, 2)))
        started = time.perf_counter()
        trim(cache)
        seconds.append(time.perf_counter() - started)
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.costs.cache_trim", description=__doc__
    )
    parser.add_argument("--features", type=integer(2), default=2_000_000, help="the bound")
    parser.add_argument("--repeats", type=integer(1), default=5, help="trims timed, each way")
    args = parser.parse_args(argv)
    warm_up()  # compiled (or loaded from numba's cache) first, as a worker does at start
    medians = []
    for name, trim in (("trim", StateCache.trim), ("rebuild", rebuild)):
        runs = timings(args.features, args.repeats, trim)
        medians.append(statistics.median(runs))
        listed = ", ".join(f"{1e3 * s:.0f}" for s in runs)
        print(f"{name:>7}: median {1e3 * medians[-1]:.0f} ms (runs: {listed} ms)")
    print(f"rebuild / trim: {medians[1] / medians[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
