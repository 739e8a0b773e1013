"""Compile every cached numba kernel once, into numba's cache beside the sources.

``make test`` runs this beside the lint, before pytest starts its test processes: in a fresh
clone the cache is empty, and each of those processes (and each API, worker and replay process
the tests start) would otherwise compile the same kernels at the same time, on the same two
cores. A kernel compiled here is loaded from the cache by all of them.

Run: ``python -m testkit.warm_kernels`` (prints what it compiled and how long it took).
"""

from __future__ import annotations

import time

from online_ctr.learning import columnar, hashing, sequential
from online_ctr.learning.rules import RULES
from service.api import scan


def warm() -> list[str]:
    """Load or compile the kernels of every rule, the readers and the request scanner; the
    names of what was warmed, in order."""
    done = []
    for name, rule in sorted(RULES.items()):
        sequential.warm_up(rule, rule.params())  # its learner, row math, grouping and table
        done.append(name)
    hashing.warm_up()
    columnar.warm_up()
    scan.warm_up()
    return [*done, "hashing", "columnar", "scan"]


def main() -> int:
    started = time.perf_counter()
    done = warm()
    print(f"numba kernels warm ({', '.join(done)}) in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
