"""The pointer chase behind the scale report's latency lines: one cycle through every slot,
and a figure for each block (its size is not asserted: timings never are)."""

from __future__ import annotations

import math

import numpy as np

from loadtests.bench import memory_latency


def test_a_chain_visits_every_slot_once_before_it_returns_to_the_start() -> None:
    chain = memory_latency.single_cycle(1_000, np.random.default_rng(3))
    seen = {at_after(chain, steps) for steps in range(1_000)}
    assert at_after(chain, 1_000) == 0 and seen == set(range(1_000))
    assert memory_latency.walk(chain, 1_000) == 0
    assert memory_latency.walk(chain, 7) == at_after(chain, 7)


def at_after(chain: np.typing.NDArray[np.int64], steps: int) -> int:
    at = 0
    for _ in range(steps):
        at = int(chain[at])
    return at


def test_load_ns_is_a_positive_time_per_load() -> None:
    ns = memory_latency.load_ns(1, steps=10_000)
    assert math.isfinite(ns) and ns > 0
