"""What one touched feature costs Redis as the model grows, and what the commit size buys:
``python -m loadtests.costs.store_costs``.

1. Per-feature cost: on a fresh redis-server, the state shards of an FTRL model (the default
   layout) are filled directly (``StateShards.apply``, no worker) to 0, 100k, 1M and 10M random
   features; at each size, 20 rounds of 5,000 new features are read (``StateShards.read``: a
   miss, as for every new feature) and written (``apply``). Printed: microseconds per feature,
   client packing included (no existence filter: every read goes to Redis), then Redis's own
   share: its CPU per feature (``/proc``, in ticks of 10 ms) and its microseconds per HGET and
   HSET (``INFO commandstats``). Those grow as the keyspace outgrows the CPU's caches, with
   the same script work per feature at every size: ``make bench-scale`` with 2^20 buckets, a
   quarter as many features per bucket at 10M, measured the same microseconds per call.
2. Drain against commit size: 200,000 Criteo rows in entries of 1,000 pre-filled in the stream,
   learned by one in-process worker (cold, kernel compiled first) at several ``batch_size``:
   examples per second, and Redis HSETs per example (one per bucket an apply writes, so about
   one per feature written: grouped applies write a feature once for several commits).

Prints figures only; no targets (those are ``make bench-scale``'s).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from loadtests.common.stats import CommandUsec, calls, command_usec, cpu_seconds, per_call_us
from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.readers import read_examples
from online_ctr.learning.rules import get_rule
from online_ctr.learning.sequential import warm_up
from online_ctr.metrics import Metrics
from online_ctr.store import codec
from online_ctr.store.state import ModelStore, spec_from
from testkit.paths import CRITEO
from workers.learner_loop import Worker, WorkerConfig

SIZES = (0, 100_000, 1_000_000, 10_000_000)


async def fresh_store(url: str) -> ModelStore:
    client = aioredis.Redis.from_url(url)
    await client.flushall()
    rule = get_rule("ftrl")
    store = ModelStore(client, spec_from("default", "ftrl", rule.params(), None, 1 << 18, 64))
    await store.ensure()
    return store


def per_call(before: CommandUsec, after: CommandUsec) -> str:
    """Redis's microseconds per HGET and per HSET between two ``INFO commandstats`` reads."""
    made = ((name.upper(), per_call_us(before, after, name)) for name in ("hget", "hset"))
    return ", ".join(f"no {n}" if math.isnan(us) else f"{us:.2f} us/{n}" for n, us in made)


async def per_feature(url: str, sizes: tuple[int, ...], pid: int | None = None) -> None:
    """See the module doc; ``pid``: the redis-server's, for its CPU time (None: not shown)."""
    store = await fresh_store(url)
    layout, rng, seq, have = store.spec.layout, np.random.default_rng(1), 0, 0
    for size in sizes:
        while have < size:
            k = min(500_000, size - have)
            ids = rng.integers(0, 2**64 - 1, size=k, dtype=np.uint64, endpoint=True)
            seq += 1
            await store.shards.apply(seq, layout.records(ids, rng.normal(size=(k, 2))))
            have += k
        read_s = write_s = 0.0
        before = command_usec(await store.redis.info("commandstats"))
        cpu = cpu_seconds(pid) if pid else 0.0
        for _ in range(20):
            ids = rng.integers(0, 2**64 - 1, size=5_000, dtype=np.uint64, endpoint=True)
            started = time.perf_counter()
            await store.shards.read(ids)
            read = time.perf_counter()
            seq += 1
            await store.shards.apply(seq, layout.records(ids, rng.normal(size=(5_000, 2))))
            read_s, write_s = read_s + read - started, write_s + time.perf_counter() - read
            have += 5_000
        redis = per_call(before, command_usec(await store.redis.info("commandstats")))
        if pid:
            redis = f"{(cpu_seconds(pid) - cpu) / 1e5 * 1e6:.2f} us CPU/feature, {redis}"
        print(
            f"model of {size:>10,} features: read {read_s / 1e5 * 1e6:.2f} us/feature, "
            f"write {write_s / 1e5 * 1e6:.2f} us/feature; Redis: {redis}"
        )
    await store.redis.aclose()


async def drain(url: str, rows: int, batch_sizes: tuple[int, ...]) -> None:
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), 10_000))
    hasher = FeatureHasher()
    entries = [
        codec.encode_entry(hasher.batch([x for x, _ in chunk], [y for _, y in chunk]))
        for chunk in (examples[i : i + 1_000] for i in range(0, len(examples), 1_000))
    ]
    for batch_size in batch_sizes:
        store = await fresh_store(url)
        warm_up(store.spec.rule, store.spec.params)
        async with store.redis.pipeline(transaction=False) as pipe:
            for index in range(rows // 1_000):
                pipe.xadd(store.keys.stream, {"b": entries[index % len(entries)]})
            await pipe.execute()
        config = WorkerConfig(name="bench", batch_size=batch_size)
        worker = Worker(store, config, Metrics(CollectorRegistry()))
        before = command_usec(await store.redis.info("commandstats"))
        started = time.perf_counter()
        commits = await worker.run_until_idle()
        seconds = time.perf_counter() - started
        after = command_usec(await store.redis.info("commandstats"))
        print(
            f"drain at batch_size {batch_size:>6,}: {rows / seconds:,.0f} ex/s ({commits} commits, "
            f"{calls(before, after, 'hset') / rows:.2f} HSETs/example)"
        )
        await store.redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.costs.store_costs", description=__doc__
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a try")
    quick = parser.parse_args().quick
    with tempfile.TemporaryDirectory() as folder, RedisServer(Path(folder), persist=False) as r:
        url = r.url
        asyncio.run(per_feature(url, (0, 20_000) if quick else SIZES, r.pid))
        asyncio.run(drain(url, 10_000 if quick else 200_000, (4_096, 65_536)))


if __name__ == "__main__":
    main()
