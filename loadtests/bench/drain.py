"""A real ``online-ctr worker`` draining a stream filled before it starts.

Every entry is written with XADD before the worker starts, so the timing is the worker's
alone: the clock starts at its first heartbeat (sent just before its first read) and stops
when the model's step reaches the number of examples. One worker learns a model at a time
(it holds the model's lease); others would only stand by for failover, so one is measured.
Redis operations are the ``INFO commandstats`` deltas over that window, commands run inside
the Lua scripts included, the benchmark's own calls (one INFO, the HGET polls of the step)
subtracted.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from loadtests.common import feed
from loadtests.common.processes import Stack
from loadtests.common.stats import CpuMeter, calls_delta, command_calls


@dataclass(frozen=True)
class DrainRun:
    """One worker draining a pre-filled stream of entries of ``per_entry`` examples."""

    per_entry: int
    examples: int
    seconds: float
    calls: dict[str, int]
    cores: dict[str, float]
    logloss: float | None

    @property
    def examples_per_second(self) -> float:
        return self.examples / self.seconds

    @property
    def examples_per_cpu_second(self) -> float:
        """Examples per CPU second of the worker and Redis together."""
        return self.examples / (sum(self.cores.values()) * self.seconds)


def run_learner(
    stack: Stack, rows: list[feed.Row], n: int, per_entry: int = 1, **env: str
) -> DrainRun:
    """Fill the stream with ``n`` examples (the rows cycled, ``per_entry`` to an entry, as
    ``/learn`` bodies of that size write them), start one worker, time its drain.

    ``n`` must be a multiple of ``per_entry``; ``env`` adds settings (``OCTR_BATCH_SIZE``).
    """
    if n % per_entry:
        raise ValueError(f"{n} examples do not fill entries of {per_entry}")
    client = stack.client()
    client.flushall()
    # Enough whole passes over the rows that the entries, cycled, keep the rows' order.
    blobs = feed.entries(feed.cycled(rows, math.lcm(len(rows), per_entry)), per_entry)
    feed.feed(client, blobs, n // per_entry)
    (worker,) = stack.start_workers(1, **env)
    feed.wait_for_worker(client, stack.check_alive)
    meter = CpuMeter({"redis": stack.redis_pid, "worker": worker.pid})
    before = command_calls(client.info("commandstats"))
    started = time.perf_counter()
    ended, polls = feed.wait_for_step(client, n, max(300.0, n / 200), stack.check_alive)
    cores = meter.cores()
    after = command_calls(client.info("commandstats"))
    # Our own calls in the window: the first INFO, and the HGET polls.
    calls = calls_delta(before, after, minus={"info": 1, "hget": polls})
    run = DrainRun(
        per_entry=per_entry,
        examples=n,
        seconds=ended - started,
        calls=calls,
        cores={"redis": cores["redis"], "worker": cores["worker"]},
        logloss=feed.progressive_logloss(client),
    )
    stack.stop(*stack.workers())
    client.close()
    return run
