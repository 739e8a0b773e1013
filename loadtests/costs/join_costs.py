"""What joins cost: ``python -m loadtests.costs.join_costs``.

Memory: on a fresh redis-server, N Criteo rows (the head file, cycled) are logged as pending
impressions as ``/predict`` logs them (passes of 1,000), and ``INFO`` ``used_memory`` growth
over N is the bytes one pending impression holds (its hash: the served example, p, model,
state; and its pending-set member). Then every window is closed and swept with ``drop`` (no
stream entries), and the growth left over N is the bytes of one tombstone. With
``--features K``, each row is K string features of its own instead (``f0=v<i>_0`` ...): the
cost of wide examples. ``--memory-only`` skips the throughput.

Throughput: N sequential single ``/predict`` calls (httpx, one connection) against the real
``online-ctr api`` process, with joins off and with joins on (each answer logged first),
alternated over rounds; printed as requests/s and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx
import redis.asyncio as aioredis

from loadtests.common.feed import Row, criteo_rows, cycled
from loadtests.common.processes import Stack
from online_ctr.cli.embedded import RedisServer
from online_ctr.config.join_policy import JoinPolicy
from online_ctr.learning.features import FeatureHasher
from online_ctr.store import codec
from online_ctr.store.impressions import Impressions
from online_ctr.store.keys import ModelKeys
from testkit.paths import DATA_DIR

PASS = 1000
KEYS = ModelKeys("default")


async def _used(client: aioredis.Redis) -> int:
    return int((await client.info("memory"))["used_memory"])


async def memory(url: str, rows: list[Row]) -> tuple[float, float]:
    """Bytes per pending impression and per tombstone, for ``len(rows)`` of them."""
    client = aioredis.Redis.from_url(url, socket_timeout=60)
    await client.flushall()
    impressions = Impressions(client, KEYS.feedback, [KEYS.stream], JoinPolicy(3600, "drop"))
    hasher = FeatureHasher()
    before = await _used(client)
    for start in range(0, len(rows), PASS):
        chunk = [x for x, _ in rows[start : start + PASS]]
        entries = codec.encode_rows(hasher.batch(chunk))
        ids = [f"p{start + j:012d}" for j in range(len(chunk))]
        sizes = [len(chunk)]
        done = await impressions.log(ids, entries, [0.1] * len(chunk), "default", sizes, len(rows))
        assert not done.unlogged, done
    pending = await _used(client) - before
    # Close every window now: a deadline of 0 for each (the load test's shortcut).
    await client.zunionstore(KEYS.feedback.pending, {KEYS.feedback.pending: 0})
    while (await impressions.sweep()).taken:
        pass
    tombstones = await _used(client) - before
    await client.aclose()
    return pending / len(rows), tombstones / len(rows)


def wide_rows(count: int, features: int) -> list[Row]:
    """``count`` rows of ``features`` string features each, every value its own.

    >>> wide_rows(1, 2)
    [({'f0': 'v0_0', 'f1': 'v0_1'}, 0)]
    """
    return [({f"f{k}": f"v{i}_{k}" for k in range(features)}, 0) for i in range(count)]


def _rate(url: str, rows: list[Row], requests: int) -> float:
    """Sequential single /predict requests per second."""
    bodies = [{"features": x} for x, _ in cycled(rows, requests)]
    with httpx.Client(base_url=url, timeout=30) as client:
        client.post("/predict", json=bodies[0]).raise_for_status()  # warm
        started = time.perf_counter()
        for body in bodies:
            client.post("/predict", json=body).raise_for_status()
        return requests / (time.perf_counter() - started)


def throughput(work_dir: Path, rows: list[Row], requests: int, rounds: int) -> tuple[float, float]:
    """Mean over the rounds of' requests/s without and with join logging."""
    rates: dict[str, list[float]] = {"0": [], "3600": []}
    with Stack(work_dir) as stack:
        for _ in range(rounds):
            for window in rates:
                url = stack.start_api(OCTR_JOIN_WINDOW_S=window)
                rates[window].append(_rate(url, rows, requests))
                stack.stop("api")
    off, on = (sum(r) / len(r) for r in rates.values())
    return off, on


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impressions", type=int, default=200_000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    parser.add_argument("--features", type=int, default=0, help="K features a row; 0: Criteo")
    parser.add_argument("--memory-only", action="store_true")
    args = parser.parse_args(argv)
    rows = criteo_rows(args.data_dir)
    logged, what = cycled(rows, args.impressions), "Criteo rows"
    if args.features:
        logged = wide_rows(args.impressions, args.features)
        what = f"rows of {args.features:,} features"
    with tempfile.TemporaryDirectory() as scratch:
        with RedisServer(Path(scratch) / "memory", persist=False) as server:
            pending, tombstone = asyncio.run(memory(server.url, logged))
        print(
            f"memory: {pending:.0f} bytes per pending impression, {tombstone:.0f} bytes per "
            f"tombstone ({args.impressions:,} {what})",
            flush=True,
        )
        if args.memory_only:
            return 0
        off, on = throughput(Path(scratch), rows, args.requests, args.rounds)
    print(
        f"/predict: {off:.0f} req/s without joins, {on:.0f} req/s with join logging "
        f"(ratio {on / off:.2f}; {args.requests:,} sequential single requests x {args.rounds})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
