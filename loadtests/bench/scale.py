"""What the scale benchmark measures on one running service, and the figures it keeps.

A service is one Redis, one real ``online-ctr api`` and one real ``online-ctr worker``
(:class:`loadtests.common.processes.Stack`), with the Criteo rows to post (a :class:`Rig`). Each
timing here is one run on one rig; :mod:`loadtests.bench.scale_run` decides which rigs, at which
sizes, take their turns.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from itertools import cycle, islice
from pathlib import Path

from loadtests.bench.scale_client import (
    BODY_EXAMPLES,
    WINDOW_BODY_EXAMPLES,
    Fill,
    ModelClient,
    Row,
    UniqueFeatures,
    learn_bodies,
    predict_bodies,
)
from loadtests.bench.sequential import Timing, timed
from loadtests.common.processes import Stack, wait_until
from loadtests.common.stats import CommandUsec, command_usec, cpu_seconds
from online_ctr.store.commits import redo_records
from online_ctr.store.keys import ModelKeys

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
    """A whole run: how ``/predict`` was timed, the model before the fills, each size, and
    the smallest size measured again beside each larger one (``alongside[i]`` beside
    ``results[i + 1]``)."""

    tool: str
    warm_up_features: int
    baseline_bytes: int
    results: list[SizeResult] = field(default_factory=list)
    alongside: list[SizeResult] = field(default_factory=list)


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
    seen = ["nothing read yet"]

    def applied() -> bool:
        stack.check_alive()
        with stack.client() as redis:
            last = redis.xrevrange(keys.redo, count=1)
            if not last:
                return True
            entry_id, fields = last[0]
            seq = int(entry_id.split(b"-")[0])
            names = [name.decode() for name, _ in redo_records(fields)]
            done = [int(d or 0) for d in redis.mget(keys.shard(int(n[1:])).applied for n in names)]
            lagging = {n: d for n, d in zip(names, done, strict=True) if d < seq}
            seen[0] = f"last commit {seq}, shards behind it (applied): {lagging}"
            return not lagging

    try:
        wait_until(applied, 60, "the last commit applied to every shard")
    except RuntimeError as error:
        raise RuntimeError(f"{error}; {seen[0]}\n{stack.logs()}") from None


def redis_usec(stack: Stack) -> CommandUsec:
    """Redis's ``INFO commandstats`` now: per command, its calls and microseconds so far."""
    with stack.client() as redis:
        return command_usec(redis.info("commandstats"))


def service_cpu(stack: Stack) -> tuple[float, float, float]:
    """CPU seconds Redis, the API and the first worker have used so far."""
    pids = stack.redis_pid, stack.children["api"].pid, stack.children[stack.workers()[0]].pid
    redis, api, worker = (cpu_seconds(pid) for pid in pids)
    return redis, api, worker


@dataclass(frozen=True)
class Rig:
    """A running service, a client of its model, what is posted to it, and Redis's
    ``used_memory`` while the model was empty."""

    stack: Stack
    client: ModelClient
    bodies: Bodies
    predict_url: str
    empty_bytes: int

    def check(self) -> None:
        self.stack.check_alive()


@dataclass
class Windows:
    """Timed fill windows of one rig at one size, and what Redis (its commands) and the
    processes (CPU seconds of Redis, the API and the worker) spent in them."""

    fills: list[Fill] = field(default_factory=list)
    usec: CommandUsec = field(default_factory=dict)
    cpu: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])

    def time(self, rig: Rig, end: int, factory: UniqueFeatures) -> None:
        """Fill the model to ``end`` tracked features in small bodies, timed until learned,
        and wait for the apply (so the next timing starts from an idle worker)."""
        before, cpu_before = redis_usec(rig.stack), service_cpu(rig.stack)
        self.fills.append(rig.client.fill(end, factory, rig.check, WINDOW_BODY_EXAMPLES))
        wait_until_applied(rig.stack)
        after, cpu_after = redis_usec(rig.stack), service_cpu(rig.stack)
        for name, (made, usec) in after.items():
            made_before, usec_before = before.get(name, (0, 0))
            so_far = self.usec.get(name, (0, 0))
            self.usec[name] = (so_far[0] + made - made_before, so_far[1] + usec - usec_before)
        for process, (a, b) in enumerate(zip(cpu_before, cpu_after, strict=True)):
            self.cpu[process] += b - a

    @property
    def features(self) -> int:
        return sum(f.features for f in self.fills)


def start_again(rig: Rig, end: int, factory: UniqueFeatures) -> Fill:
    """Delete the model (the service's own: it starts again empty), learn the Criteo rows
    again and fill it to ``end``, untimed but for the fill's figure: the model a reference
    window starts from, each time the same."""
    rig.client.delete()
    rig.client.learn_all(rig.bodies.learn, len(rig.bodies.learn), rig.check)
    fill = rig.client.fill(end, factory, rig.check)
    wait_until_applied(rig.stack)
    return fill


def learned(rig: Rig, count: int) -> float:
    """Examples per second: ``count`` Criteo bodies posted, until learned and applied."""
    seconds = rig.client.learn_all(rig.bodies.learn, count, rig.check)
    wait_until_applied(rig.stack)
    return count * BODY_EXAMPLES / seconds


def drain(rig: Rig, count: int) -> float:
    """Stop the worker, post ``count`` bodies, start a worker: its learning rate, examples
    per second from the moment it holds the model's lease (it has started, imported and
    connected, which a running worker does not pay) until it has learned them all; its
    cache starts cold."""
    stack, client = rig.stack, rig.client
    stack.stop(*stack.workers())
    target = client.progress().step + count * BODY_EXAMPLES
    for body in islice(cycle(rig.bodies.learn), count):
        client.learn(body)
    lease = ModelKeys("default").lease  # the model the benchmark fills
    with stack.client() as redis:
        redis.delete(lease)  # the stopped worker released it; make sure
        stack.start_workers(1)
        while not redis.exists(lease):
            stack.check_alive()
            time.sleep(0.001)
        leading = time.perf_counter()
    seconds = client.wait_for_step(target, stack.check_alive) - leading
    wait_until_applied(stack)
    return count * BODY_EXAMPLES / seconds


def single_predict(rig: Rig, tool: str, duration_s: float) -> Timing:
    """Single-example ``/predict`` one request at a time for ``duration_s``."""
    return timed(tool, rig.predict_url, rig.bodies.single, duration_s)


def batch_predict(rig: Rig, tool: str, duration_s: float) -> float:
    """Examples per second of batch ``/predict``, one request at a time."""
    return timed(tool, rig.predict_url, rig.bodies.batch, duration_s).requests_per_s * (
        BODY_EXAMPLES
    )


def write_bodies(folder: Path, rows: list[Row]) -> Bodies:
    """Learn bodies in memory; single and 1,000-example ``/predict`` bodies in files."""
    return Bodies(
        learn=learn_bodies(rows),
        single=predict_bodies(folder / "single.jsonl", rows, 1),
        batch=predict_bodies(folder / "batch.jsonl", rows, BODY_EXAMPLES),
    )
