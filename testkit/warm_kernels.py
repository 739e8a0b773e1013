"""Compile every cached numba kernel once, into numba's cache beside the sources.

``make test`` runs this beside the lint, before pytest starts its test processes: in a fresh
clone the cache is empty, and each of those processes (and each API, worker and replay process
the tests start) would otherwise compile the same kernels at the same time, on the same two
cores. A kernel compiled here is loaded from the cache by all of them.

numba compiles on one core, holding the GIL, so ``make test`` runs two parts at once
(``--part 1/2`` and ``--part 2/2``) beside the lint, which needs a core for a third of the time.

Run: ``python -m testkit.warm_kernels [--part K/N]`` (prints what it compiled and how long it
took).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from online_ctr.learning import columnar, hashing, precompiled, sequential
from online_ctr.learning.rules import RULES
from service.api import scan


def jobs() -> list[tuple[str, Callable[[], None]]]:
    """Every kernel set, by name: the largest first (the request scanner, ~8 CPU-s cold; the
    first rule also compiles the grouping and table kernels every rule shares), so that
    alternate parts are about even."""
    rules = sorted(RULES.items())
    return [
        ("scan", scan.warm_up),
        *(
            (name, lambda rule=rule: sequential.warm_up(rule, rule.params()))
            for name, rule in rules
        ),
        ("hashing", hashing.warm_up),
        ("columnar", columnar.warm_up),
    ]


def warm(part: int = 1, parts: int = 1) -> list[str]:
    """Load or compile part ``part`` of ``parts`` of the kernels (each rule's learner, row
    math, grouping and table; the readers; the request scanner); the names warmed, in order.
    The JIT's, also where a kernel has a precompiled form (:mod:`online_ctr.learning
    .precompiled`): the tests run both."""
    done = []
    with precompiled.disabled():
        for name, warm_up in jobs()[part - 1 :: parts]:
            warm_up()
            done.append(name)
    return done


def part_of(text: str) -> tuple[int, int]:
    """``K/N`` as (K, N), 1 <= K <= N."""
    try:
        part, parts = (int(number) for number in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected K/N, e.g. 1/2") from None
    if not 1 <= part <= parts:
        raise argparse.ArgumentTypeError(f"{text!r}: K must be from 1 to N")
    return part, parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.warm_kernels")
    parser.add_argument("--part", type=part_of, default=(1, 1), help="K/N: every Nth kernel set")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    done = warm(*args.part)
    print(f"numba kernels warm ({', '.join(done)}) in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
