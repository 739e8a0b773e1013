"""What the scale benchmark measures at each model size, through the real service.

One Redis, one real ``online-ctr api`` and one real ``online-ctr worker``
(:class:`loadtests.processes.Stack`). The model first learns the Criteo rows once, so
``/predict`` reads real state and the later Criteo posts add no features; then, for each size
in increasing order, new features are learned until ``features_tracked`` reaches it, and the
costs are measured at that size (:func:`measure_size`).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import cycle, islice
from pathlib import Path

from loadtests.processes import Stack, http_ok, scratch_dir, wait_until
from loadtests.scale_client import (
    BODY_EXAMPLES,
    WINDOW_BODY_EXAMPLES,
    ModelClient,
    Row,
    UniqueFeatures,
    criteo_rows,
    learn_bodies,
    predict_bodies,
)
from loadtests.sequential import Timing, timed, timing_tool
from loadtests.stats import CommandUsec, calls, command_usec, cpu_seconds, per_call_us, rss_bytes
from octr.store.keys import ModelKeys

MIB = 1024 * 1024


@dataclass(frozen=True)
class ScaleConfig:
    """How big a run: model sizes, Criteo rows posted per timing, how long each timing."""

    sizes: tuple[int, ...]
    examples: int
    criteo_rows: int
    duration_s: float
    per_example: int
    fill_window: int
    data_dir: Path
    rounds: int = 3


@dataclass(frozen=True)
class SizeResult:
    """Every figure measured at one model size."""

    target: int
    tracked: int
    bulk_fill_features_per_s: float
    fill_window: int
    fill_features_per_s: float
    learned_examples_per_s: float
    drain_examples_per_s: float
    predict_p50_ms: float
    predict_p99_ms: float
    batch_examples_per_s: float
    redis_bytes_per_feature: float
    worker_rss_mib: float
    api_rss_mib: float
    load_1min: float
    hget_us: float = math.nan
    hset_us: float = math.nan
    #: HGETs (reads of a feature from its bucket) per feature added in the fill windows.
    hgets_per_feature: float = math.nan
    #: CPU microseconds per feature added, in the timed fill windows, of Redis, the API and
    #: the worker: where a size's extra time goes.
    redis_cpu_us: float = math.nan
    api_cpu_us: float = math.nan
    worker_cpu_us: float = math.nan
    #: Per timed figure that is a median, the rounds it is the median of.
    rounds: dict[str, tuple[float, ...]] = field(default_factory=dict)


@dataclass
class Scale:
    """A whole run: how ``/predict`` was timed, the model before the fills, and each size."""

    tool: str
    warm_up_features: int
    baseline_bytes: int
    results: list[SizeResult] = field(default_factory=list)


@dataclass(frozen=True)
class Bodies:
    """What is posted: ``/learn`` bodies of Criteo rows, and ``/predict`` body files."""

    learn: list[bytes]
    single: Path
    batch: Path


def used_memory(stack: Stack) -> int:
    """Redis's ``INFO memory`` ``used_memory``, in bytes."""
    with stack.client() as client:
        return int(client.info("memory")["used_memory"])


def wait_until_applied(stack: Stack) -> None:
    """Wait until every shard has applied the model's last commit.

    ``global_step`` moves when a commit is recorded in the redo log; its values reach the
    shards right after, while the worker waits for more. A timing started at the step would
    pay for the previous phase's last apply (a bulk fill's is 50,000 HSETs)."""
    keys = ModelKeys("default")  # the model the benchmark fills

    def applied() -> bool:
        stack.check_alive()
        with stack.client() as redis:
            last = redis.xrevrange(keys.redo, count=1)
            if not last:
                return True
            entry_id, fields = last[0]
            seq = int(entry_id.split(b"-")[0])
            shards = [keys.shard(int(name[1:])).applied for name in fields]
            return all(int(done or 0) >= seq for done in redis.mget(shards))

    wait_until(applied, 60, "the last commit applied to every shard")


def redis_usec(stack: Stack) -> CommandUsec:
    """Redis's ``INFO commandstats`` now: per command, its calls and microseconds so far."""
    with stack.client() as redis:
        return command_usec(redis.info("commandstats"))


def service_cpu(stack: Stack) -> tuple[float, float, float]:
    """CPU seconds Redis, the API and the first worker have used so far."""
    pids = stack.redis_pid, stack.children["api"].pid, stack.children[stack.workers()[0]].pid
    redis, api, worker = (cpu_seconds(pid) for pid in pids)
    return redis, api, worker


def median_of(rounds: int, timing: Callable[[], float]) -> tuple[float, tuple[float, ...]]:
    """The median of ``rounds`` runs of ``timing``, and the runs."""
    runs = tuple(timing() for _ in range(rounds))
    return statistics.median(runs), runs


def drain(stack: Stack, client: ModelClient, bodies: Sequence[bytes], count: int) -> float:
    """Stop the worker, post ``count`` bodies, start a worker: its learning rate, examples
    per second from the moment it holds the model's lease (it has started, imported and
    connected, which a running worker does not pay) until it has learned them all; its
    cache starts cold."""
    stack.stop(*stack.workers())
    target = client.progress().step + count * BODY_EXAMPLES
    for body in islice(cycle(bodies), count):
        client.learn(body)
    lease = ModelKeys("default").lease  # the model the benchmark fills
    with stack.client() as redis:
        redis.delete(lease)  # the stopped worker released it; make sure
        stack.start_workers(1)
        while not redis.exists(lease):
            stack.check_alive()
            time.sleep(0.001)
        leading = time.perf_counter()
    return count * BODY_EXAMPLES / (client.wait_for_step(target, stack.check_alive) - leading)


@dataclass(frozen=True)
class Rig:
    """The running service, a client of its model, and what is posted to it."""

    stack: Stack
    client: ModelClient
    bodies: Bodies
    predict_url: str


def measure_size(rig: Rig, config: ScaleConfig, scale: Scale, target: int) -> SizeResult:
    """Fill the model to ``target`` tracked features, then measure every figure.

    The fill's last ``config.rounds`` windows of ``fill_window`` features (fewer where the size
    leaves no room for them) are timed one by one, each from an idle worker, so that every
    size's fill rate covers the same amount of work; its figure is their median, and Redis's
    own microseconds per HGET and HSET in them are read from ``INFO commandstats``. The other
    timings are each the median of ``config.rounds`` runs too (the machine is shared: single
    runs swing).
    """
    stack, client, bodies = rig.stack, rig.client, rig.bodies
    factory = UniqueFeatures(config.per_example, seed=target)
    # Whole windows only: as many as there is room for below the size (at least one).
    room = (target - client.progress().tracked) // config.fill_window
    timed = max(1, min(config.rounds, room))
    bulk = client.fill(target - config.fill_window * timed, factory, stack.check_alive)
    wait_until_applied(stack)  # each timing starts from a worker with nothing in flight
    before, cpu_before = redis_usec(stack), service_cpu(stack)
    windows = []
    for left in reversed(range(timed)):
        end = target - config.fill_window * left
        windows.append(client.fill(end, factory, stack.check_alive, WINDOW_BODY_EXAMPLES))
        wait_until_applied(stack)
    after, cpu_after = redis_usec(stack), service_cpu(stack)
    added = sum(w.features for w in windows)
    redis_cpu, api_cpu, worker_cpu = (
        (b - a) / added * 1e6 if added else math.nan
        for a, b in zip(cpu_before, cpu_after, strict=True)
    )
    fill_runs = tuple(w.features_per_second for w in windows if w.features > 0)
    tracked = client.progress().tracked
    grown = used_memory(stack) - scale.baseline_bytes
    count = math.ceil(config.examples / BODY_EXAMPLES)

    def learned() -> float:
        seconds = client.learn_all(bodies.learn, count, stack.check_alive)
        wait_until_applied(stack)
        return count * BODY_EXAMPLES / seconds

    learned_rate, learned_runs = median_of(config.rounds, learned)
    # The worker that did the fill and the timed learning: its state copies are the largest.
    worker_rss = rss_bytes(stack.children[stack.workers()[0]].pid)
    api_rss = rss_bytes(stack.children["api"].pid)
    drain_rate, drain_runs = median_of(
        config.rounds, lambda: drain(stack, client, bodies.learn, count)
    )
    single, batch = predict_timings(rig, config, scale.tool)
    return SizeResult(
        target=target,
        tracked=tracked,
        bulk_fill_features_per_s=bulk.features_per_second,
        fill_window=min(w.features for w in windows),
        fill_features_per_s=statistics.median(fill_runs) if fill_runs else math.nan,
        learned_examples_per_s=learned_rate,
        drain_examples_per_s=drain_rate,
        predict_p50_ms=statistics.median(t.p50_ms for t in single),
        predict_p99_ms=statistics.median(t.p99_ms for t in single),
        batch_examples_per_s=statistics.median(batch),
        redis_bytes_per_feature=grown / tracked,
        worker_rss_mib=worker_rss / MIB,
        api_rss_mib=api_rss / MIB,
        load_1min=os.getloadavg()[0],
        hget_us=per_call_us(before, after, "hget"),
        hset_us=per_call_us(before, after, "hset"),
        hgets_per_feature=calls(before, after, "hget") / added if added else math.nan,
        redis_cpu_us=redis_cpu,
        api_cpu_us=api_cpu,
        worker_cpu_us=worker_cpu,
        rounds={
            "fill_features_per_s": fill_runs,
            "learned_examples_per_s": learned_runs,
            "drain_examples_per_s": drain_runs,
            "predict_p99_ms": tuple(t.p99_ms for t in single),
            "batch_examples_per_s": batch,
        },
    )


def predict_timings(
    rig: Rig, config: ScaleConfig, tool: str
) -> tuple[list[Timing], tuple[float, ...]]:
    """``config.rounds`` timings of single ``/predict`` (after a warm-up), and as many of
    batch ``/predict`` in examples per second."""
    url, bodies = rig.predict_url, rig.bodies
    timed(tool, url, bodies.single, min(config.duration_s, 3.0))
    single = [timed(tool, url, bodies.single, config.duration_s) for _ in range(config.rounds)]
    batch = tuple(
        timed(tool, url, bodies.batch, config.duration_s).requests_per_s * BODY_EXAMPLES
        for _ in range(config.rounds)
    )
    return single, batch


def write_bodies(folder: Path, rows: list[Row]) -> Bodies:
    """Learn bodies in memory; single and 1,000-example ``/predict`` bodies in files."""
    return Bodies(
        learn=learn_bodies(rows),
        single=predict_bodies(folder / "single.jsonl", rows, 1),
        batch=predict_bodies(folder / "batch.jsonl", rows, BODY_EXAMPLES),
    )


def start(stack: Stack) -> str:
    """The API and one worker; the API's URL once a worker's heartbeat made it ready."""
    url = stack.start_api()
    stack.start_workers(1)

    def ready() -> bool:
        stack.check_alive()
        return http_ok(f"{url}/readyz")

    wait_until(ready, 60, "a ready API (a worker heartbeat)")
    return url


def measure(config: ScaleConfig, on_result: Callable[[SizeResult], None]) -> Scale:
    """Every size in increasing order on one model; ``on_result`` hears each as it ends."""
    rows = criteo_rows(config.data_dir, limit=config.criteo_rows)
    with scratch_dir("scale") as folder, Stack(Path(folder)) as stack:
        url = start(stack)
        scale = Scale(timing_tool(), 0, used_memory(stack))  # the empty model
        rig = Rig(stack, ModelClient(url), write_bodies(Path(folder), rows), f"{url}/predict")
        try:
            rig.client.learn_all(rig.bodies.learn, len(rig.bodies.learn), stack.check_alive)
            scale.warm_up_features = rig.client.progress().tracked
            for target in sorted(config.sizes):
                scale.results.append(measure_size(rig, config, scale, target))
                on_result(scale.results[-1])
        finally:
            rig.client.close()
    return scale
