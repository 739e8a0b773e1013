"""The scale benchmark's run: two services, and which of them takes which turn.

A *reference* service holds its model at the smallest size; a second service *grows* its model
to each larger size in turn. Both first learn the Criteo rows once, so ``/predict`` reads real
state and the later Criteo posts add no features. The smallest size is measured first on the
reference alone; then at each larger size every timing is run on both services in turns
(reference, grown, grown, reference...), so that the smallest size's figures and the larger
size's come from the same minutes of a shared machine, whose speed drifts between minutes.

The reference starts its model again before each of its fill windows (:func:`start_again`),
so that each window ends at the smallest size; the grown model's last windows are timed one
after another, as they fill it to the size.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

from loadtests.bench.scale import (
    MIB,
    Bodies,
    Rig,
    Scale,
    ScaleConfig,
    SizeResult,
    Windows,
    batch_predict,
    drain,
    learned,
    single_predict,
    start_again,
    used_memory,
    wait_until_applied,
    write_bodies,
)
from loadtests.bench.scale_client import (
    BODY_EXAMPLES,
    Fill,
    ModelClient,
    UniqueFeatures,
    criteo_rows,
)
from loadtests.bench.sequential import Timing, timing_tool
from loadtests.common.processes import Stack, http_ok, scratch_dir, wait_until
from loadtests.common.stats import calls, per_call_us, rss_bytes

T = TypeVar("T")


@dataclass
class Side:
    """One service measured at one size: ``again`` starts its model again before each fill
    window (the reference); otherwise its windows end at ``ends``, one after another."""

    rig: Rig
    target: int
    again: bool
    factory: UniqueFeatures
    ends: list[int] = field(default_factory=list)
    bulk: Fill | None = None
    windows: Windows = field(default_factory=Windows)


def in_turns(rounds: int, timings: Sequence[Callable[[], T]]) -> list[tuple[T, ...]]:
    """``rounds`` runs of each timing, taking turns, in reverse order every other round
    (A B, B A, A B...) so that neither always goes first; each timing's runs, in order.

    >>> calls = []
    >>> in_turns(3, [lambda: calls.append("a") or 1, lambda: calls.append("b") or 2])
    [(1, 1, 1), (2, 2, 2)]
    >>> "".join(calls)
    'abbaab'
    """
    runs: list[list[T]] = [[] for _ in timings]
    for round_ in range(rounds):
        order = list(range(len(timings)))
        for which in order if round_ % 2 == 0 else reversed(order):
            runs[which].append(timings[which]())
    return [tuple(r) for r in runs]


def prepare_fill(side: Side, config: ScaleConfig) -> None:
    """Where each of the side's timed windows ends; the grown side's bulk fill up to the
    first (whole windows only: as many as there is room for below the size, at least one)."""
    if side.again:
        side.ends = [side.target] * config.rounds
        return
    rig = side.rig
    room = (side.target - rig.client.progress().tracked) // config.fill_window
    timed = max(1, min(config.rounds, room))
    side.bulk = rig.client.fill(side.target - config.fill_window * timed, side.factory, rig.check)
    wait_until_applied(rig.stack)  # each timing starts from a worker with nothing in flight
    side.ends = [side.target - config.fill_window * left for left in reversed(range(timed))]


def next_window(side: Side, config: ScaleConfig) -> None:
    """The side's next timed window, if it has one left."""
    index = len(side.windows.fills)
    if index >= len(side.ends):
        return
    if side.again:
        side.bulk = start_again(side.rig, side.target - config.fill_window, side.factory)
    side.windows.time(side.rig, side.ends[index], side.factory)


def fill_windows(sides: Sequence[Side], config: ScaleConfig) -> None:
    """Each side's bulk fill, then its timed windows, in turns."""
    for side in sides:
        prepare_fill(side, config)
    in_turns(config.rounds, [partial(next_window, side, config) for side in sides])


@dataclass(frozen=True)
class Runs:
    """What one side measured after its fill: the model's size and Redis's memory, the
    processes' RSS, and the runs of each timing."""

    tracked: int
    used_memory: int
    worker_rss: int
    api_rss: int
    learned_first: float
    learned: tuple[float, ...]
    drain: tuple[float, ...]
    single: tuple[Timing, ...]
    batch: tuple[float, ...]


def measure_sides(sides: Sequence[Side], config: ScaleConfig, tool: str) -> list[SizeResult]:
    """Every figure of each side, their timings taken in turns; one result per side."""
    fill_windows(sides, config)
    rigs = [side.rig for side in sides]
    sizes = [(rig.client.progress().tracked, used_memory(rig.stack)) for rig in rigs]
    count = math.ceil(config.examples / BODY_EXAMPLES)

    def turns(timing: Callable[[Rig], T]) -> list[tuple[T, ...]]:
        return in_turns(config.rounds, [partial(timing, rig) for rig in rigs])

    # A first run on each side, kept out of the medians: a fill larger than the worker's cache
    # (OCTR_WORKER_CACHE_FEATURES; the grown side's at 10M) has pushed the Criteo features out
    # of it, a fill within it (the reference's) has not. The timed runs then compare warm
    # caches on both sides; the drain is what compares cold ones.
    first = [learned(rig, count) for rig in rigs]
    learned_runs = turns(partial(learned, count=count))
    # The worker that did the fill and the timed learning: its state copies are the largest.
    rss = [(rss_bytes(worker_pid(rig)), rss_bytes(rig.stack.children["api"].pid)) for rig in rigs]
    drain_runs = turns(partial(drain, count=count))
    for rig in rigs:
        single_predict(rig, tool, min(config.duration_s, 3.0))  # a warm-up
    single_runs = turns(partial(single_predict, tool=tool, duration_s=config.duration_s))
    batch_runs = turns(partial(batch_predict, tool=tool, duration_s=config.duration_s))
    found = zip(sizes, rss, first, learned_runs, drain_runs, single_runs, batch_runs, strict=True)
    return [
        result(side, Runs(*size, *memory, *runs))
        for side, (size, memory, *runs) in zip(sides, found, strict=True)
    ]


def worker_pid(rig: Rig) -> int:
    return rig.stack.children[rig.stack.workers()[0]].pid


def result(side: Side, runs: Runs) -> SizeResult:
    """One side's figures from its fill windows and runs."""
    windows, added = side.windows, side.windows.features
    redis_cpu, api_cpu, worker_cpu = (s / added * 1e6 if added else math.nan for s in windows.cpu)
    fill_runs = tuple(f.features_per_second for f in windows.fills if f.features > 0)
    return SizeResult(
        target=side.target,
        tracked=runs.tracked,
        bulk_fill_features_per_s=side.bulk.features_per_second if side.bulk else math.nan,
        fill_window=min(f.features for f in windows.fills),
        fill_features_per_s=statistics.median(fill_runs) if fill_runs else math.nan,
        learned_examples_per_s=statistics.median(runs.learned),
        drain_examples_per_s=statistics.median(runs.drain),
        predict_p50_ms=statistics.median(t.p50_ms for t in runs.single),
        predict_p99_ms=statistics.median(t.p99_ms for t in runs.single),
        batch_examples_per_s=statistics.median(runs.batch),
        redis_bytes_per_feature=(runs.used_memory - side.rig.empty_bytes) / runs.tracked,
        worker_rss_mib=runs.worker_rss / MIB,
        api_rss_mib=runs.api_rss / MIB,
        load_1min=os.getloadavg()[0],
        hget_us=per_call_us({}, windows.usec, "hget"),
        hset_us=per_call_us({}, windows.usec, "hset"),
        hgets_per_feature=calls({}, windows.usec, "hget") / added if added else math.nan,
        redis_cpu_us=redis_cpu,
        api_cpu_us=api_cpu,
        worker_cpu_us=worker_cpu,
        rounds={
            "fill_features_per_s": fill_runs,
            "learned_first_examples_per_s": (runs.learned_first,),
            "learned_examples_per_s": runs.learned,
            "drain_examples_per_s": runs.drain,
            "predict_p99_ms": tuple(t.p99_ms for t in runs.single),
            "batch_examples_per_s": runs.batch,
        },
    )


def start(stack: Stack, bodies: Bodies) -> Rig:
    """The API and one worker, once a worker's heartbeat made the API ready; the model has
    learned the Criteo rows once."""
    url = stack.start_api()
    stack.start_workers(1)

    def ready() -> bool:
        stack.check_alive()
        return http_ok(f"{url}/readyz")

    wait_until(ready, 60, "a ready API (a worker heartbeat)")
    rig = Rig(stack, ModelClient(url), bodies, f"{url}/predict", used_memory(stack))
    rig.client.learn_all(bodies.learn, len(bodies.learn), stack.check_alive)
    return rig


def measure(
    config: ScaleConfig, on_result: Callable[[SizeResult, SizeResult | None], None]
) -> Scale:
    """The smallest size on the reference, then each larger one beside it; ``on_result``
    hears each size's result as it ends, with the smallest size's measured beside it (None
    for the smallest size itself)."""
    rows = criteo_rows(config.data_dir, limit=config.criteo_rows)
    smallest, *larger = sorted(config.sizes)
    tool = timing_tool()
    with scratch_dir("scale") as folder:
        bodies = write_bodies(Path(folder), rows)
        (Path(folder) / "reference").mkdir()
        (Path(folder) / "grown").mkdir()
        with Stack(Path(folder) / "reference") as first, Stack(Path(folder) / "grown") as second:
            reference, grown = start(first, bodies), start(second, bodies)
            try:
                scale = Scale(tool, reference.client.progress().tracked, reference.empty_bytes)
                alone = [Side(reference, smallest, True, factory(config, 0))]
                scale.results += measure_sides(alone, config, tool)
                on_result(scale.results[0], None)
                for target in larger:
                    sides = [
                        Side(reference, smallest, True, factory(config, 2 * target)),
                        Side(grown, target, False, factory(config, 2 * target + 1)),
                    ]
                    beside, at_size = measure_sides(sides, config, tool)
                    scale.alongside.append(beside)
                    scale.results.append(at_size)
                    on_result(at_size, beside)
            finally:
                reference.client.close()
                grown.client.close()
    return scale


def factory(config: ScaleConfig, seed: int) -> UniqueFeatures:
    """New features, none seen before by either model (each seed has its own token)."""
    return UniqueFeatures(config.per_example, seed=seed)
