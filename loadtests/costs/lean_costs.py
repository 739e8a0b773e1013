"""What the lean-model reads cost Redis: ``python -m loadtests.costs.lean_costs``.

On a fresh redis-server, the state shards of an FTRL model with ``expire_after`` (2^18
buckets, the default layout) are filled directly (``StateShards.apply``, no worker) with
``--features`` random features whose last steps are spread over 5,000 steps. Then, 20 times
each, timed from the client (round trip included):

- one estimate of the model's state bytes (:func:`online_ctr.store.state_bytes.state_bytes`,
  what ``GET /models/{name}`` and each ``/metrics`` scrape ask per model);
- one call of ``expired.lua`` over :data:`workers.gone_sweep.CALL_BUCKETS` buckets of one shard
  with half their features past their end (the longest a sweep keeps Redis busy at once).

Prints the medians; no targets.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import redis.asyncio as aioredis

from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.rules import get_rule
from online_ctr.store.state import ModelStore, spec_from
from online_ctr.store.state_bytes import state_bytes
from workers.gone_sweep import CALL_BUCKETS

ROUNDS = 20
STEPS = 5_000


async def median_ms(call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


async def measure(url: str, features: int) -> None:
    client = aioredis.Redis.from_url(url)
    spec = spec_from("m", "ftrl", get_rule("ftrl").params(), None, 1 << 18, expire_after=1)
    store = ModelStore(client, spec)
    await store.ensure()
    rng = np.random.default_rng(1)
    ids = np.unique(rng.integers(0, 2**63, features, dtype=np.int64).astype(np.uint64))
    state = np.column_stack(
        [rng.normal(size=len(ids)), rng.random(len(ids)), rng.integers(1, STEPS, len(ids))]
    ).astype(np.float64)
    for seq, first in enumerate(range(0, len(ids), 200_000), start=1):
        part = slice(first, first + 200_000)
        await store.shards.apply(seq, spec.layout.records(ids[part], state[part]))
    layout, shard = spec.layout, store.keys.shard(0)
    estimate = await median_ms(lambda: state_bytes(client, store.keys, layout, len(ids)))
    args = [shard.bucket_prefix, 0, layout.shards, CALL_BUCKETS * layout.shards, STEPS // 2]
    sweep = await median_ms(
        lambda: store.scripts.expired(keys=[shard.applied], args=[*args, layout.value_bytes])
    )
    print(
        f"model of {len(ids):,} features: state bytes estimate {estimate:.1f} ms, "
        f"expired.lua over {CALL_BUCKETS} buckets {sweep:.1f} ms (medians of {ROUNDS})"
    )
    await client.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.costs.lean_costs", description=__doc__
    )
    parser.add_argument("--features", type=int, default=2_000_000)
    features = parser.parse_args(argv).features
    with tempfile.TemporaryDirectory() as folder, RedisServer(Path(folder), persist=False) as r:
        asyncio.run(measure(r.url, features))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
