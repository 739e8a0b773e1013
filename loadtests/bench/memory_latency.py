"""How long this machine takes to load one word from memory at random, now.

A pointer chase: each load's address is the value the previous load returned, so the CPU
cannot overlap them and the time per step is the latency of one random load, page walks
included. Over a block of about the smallest model's Redis data it is what the CPU's shared
cache gives when the neighbours leave room in it; over one far larger than the caches, main
memory's. On a shared machine both swing with what the neighbours do, and the scale
benchmark's large sizes, whose Redis keyspace outgrows the caches, pay the second on nearly
every key they touch: printed at the start and at the end of a run, they tell a reader what
the machine was like while it ran. ``python -m loadtests.bench.memory_latency`` prints
them on their own.

>>> chain = single_cycle(5, np.random.default_rng(0))
>>> sorted(chain.tolist()), walk(chain, 5)
([0, 1, 2, 3, 4], 0)
"""

from __future__ import annotations

import time

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.jit import compiled

#: Block sizes chased, in MiB: about the 100k-feature model's Redis data (12 MiB), inside the
#: shared 32 MiB L3 here when the neighbours leave room; and far outside every cache (the
#: 10M-feature model's Redis holds about 300 MiB).
CACHED_MIB, MEMORY_MIB = 8, 256
#: Loads timed per block: about a fifth of a second from main memory here.
STEPS = 1_000_000


def single_cycle(slots: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """``next[i]``: the slot visited after ``i``, all ``slots`` of them in one random cycle
    (so a chase from any slot visits every one before it repeats)."""
    order = rng.permutation(slots)
    chain = np.empty(slots, np.int64)
    chain[order[:-1]] = order[1:]
    chain[order[-1]] = order[0]
    return chain


@compiled
def walk(chain: NDArray[np.int64], steps: int) -> int:
    """Follow ``chain`` from slot 0 for ``steps`` loads; the slot reached (returned, so the
    loop is not optimized away)."""
    at = 0
    for _ in range(steps):
        at = chain[at]
    return int(at)


def load_ns(mib: int, steps: int = STEPS, seed: int = 0) -> float:
    """Nanoseconds per dependent random load over a block of ``mib`` MiB. Making the chain
    wrote every slot, so the block is in memory (and as much as fits, in the caches)."""
    chain = single_cycle(mib * (1 << 20) // 8, np.random.default_rng(seed))
    walk(chain, 1)  # compiled (or loaded from numba's cache) before the clock starts
    started = time.perf_counter()
    walk(chain, steps)
    return (time.perf_counter() - started) / steps * 1e9


def describe() -> str:
    """Both latencies, as the scale report prints them."""
    cached, memory = load_ns(CACHED_MIB), load_ns(MEMORY_MIB)
    return f"{cached:.0f} ns over {CACHED_MIB} MiB, {memory:.0f} ns over {MEMORY_MIB} MiB"


if __name__ == "__main__":
    print(f"random load latency (pointer chase): {describe()}")
