"""Real ``online-ctr worker`` processes draining a stream filled before they start.

Every entry is written with XADD before the workers start, so the timing is the workers'
alone: the clock starts at the first worker heartbeat (sent just before its first read) and
stops when the model's step reaches the number of examples. A second worker's own start-up
counts against it, so a 2-worker figure is if anything low. Redis operations are the
``INFO commandstats`` deltas over that window, commands run inside the Lua scripts included,
the benchmark's own calls (one INFO, the HGET polls of the step) subtracted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

import httpx
from prometheus_client.parser import text_string_to_metric_families

from loadtests import feed
from loadtests.processes import Stack, http_ok, wait_until
from loadtests.stats import CpuMeter, calls_delta, command_calls


@dataclass(frozen=True)
class WorkerRun:
    """Real workers draining a pre-filled stream."""

    workers: int
    batch_size: int
    examples: int
    seconds: float
    calls: dict[str, int]
    cores: dict[str, float]
    conflicts: int
    logloss: float | None

    @property
    def examples_per_second(self) -> float:
        return self.examples / self.seconds

    @property
    def examples_per_cpu_second(self) -> float:
        """Examples per CPU second of the workers and Redis together."""
        return self.examples / (sum(self.cores.values()) * self.seconds)

    @property
    def ops_per_second(self) -> float:
        return sum(self.calls.values()) / self.seconds


def conflicts(metrics_urls: list[str]) -> int:
    """Commit conflicts the workers counted (their ``/metrics``).

    A worker that started late (the stream may be drained before it is up) is waited for.
    """
    total = 0.0
    for url in metrics_urls:
        wait_until(partial(http_ok, url), 60, f"worker metrics at {url}")
        text = httpx.get(url, timeout=5).text
        for family in text_string_to_metric_families(text):
            if family.name == "online_ctr_commit_conflicts":
                total += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return int(total)


def run_workers(stack: Stack, blobs: list[bytes], n: int, workers: int, batch: int) -> WorkerRun:
    """Fill the stream with ``n`` entries, start ``workers`` workers, time the drain."""
    client = stack.client()
    client.flushall()
    feed.feed(client, blobs, n)
    started_workers = stack.start_workers(workers, OCTR_BATCH_SIZE=str(batch))
    pids = {f"worker{i}": process.pid for i, process in enumerate(started_workers)}
    feed.wait_for_worker(client, stack.check_alive)
    meter = CpuMeter({"redis": stack.redis_pid, **pids})
    before = command_calls(client.info("commandstats"))
    started = time.perf_counter()
    ended, polls = feed.wait_for_step(client, n, max(300.0, n / 200), stack.check_alive)
    cores = meter.cores()
    after = command_calls(client.info("commandstats"))
    # Our own calls in the window: the first INFO, and the HGET polls.
    calls = calls_delta(before, after, minus={"info": 1, "hget": polls})
    run = WorkerRun(
        workers=workers,
        batch_size=batch,
        examples=n,
        seconds=ended - started,
        calls=calls,
        cores={"redis": cores["redis"], "workers": sum(cores[name] for name in pids)},
        conflicts=conflicts(list(stack.worker_metrics.values())),
        logloss=feed.progressive_logloss(client),
    )
    stack.stop(*stack.workers())
    client.close()
    return run
