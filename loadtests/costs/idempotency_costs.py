"""What Idempotency-Key records cost: ``python -m loadtests.costs.idempotency_costs``.

Memory: on a fresh redis-server, N keyed appends (one example each, keys of 36 characters, a
UUID, then of 255, the longest allowed) go through ``FeedbackLog`` as ``/learn`` sends them;
the stream is then deleted, and ``INFO`` ``used_memory`` growth over N is the bytes one
record holds with its index entry. ``MEMORY USAGE`` of one record and of the index (over N)
split that figure.

Latency: sequential appends on one connection, alternated call by call: without a key, with
a fresh key below the limit, and with a fresh key at the limit (each drops the oldest record);
printed as median and p99 in microseconds (the script's cost as ``/learn`` pays it).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis.asyncio as aioredis

from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.features import FeatureHasher
from online_ctr.store.idempotency import KeyLimits
from online_ctr.store.ingest import FeedbackLog
from online_ctr.store.keys import FeedbackKeys, ModelKeys

#: Appends in flight at once while filling (the API's concurrent requests).
IN_FLIGHT = 64
BATCH = FeatureHasher().batch([{"site": "news", "hour": 3.0}], [1])


def _log(client: aioredis.Redis, model: str, most: int) -> FeedbackLog:
    keys = ModelKeys(model)
    return FeedbackLog(client, keys.feedback, [keys], KeyLimits(86_400, most))


def _key(i: int, length: int) -> str:
    """A distinct key of ``length`` characters (a UUID at 36).

    >>> len(_key(7, 36)), len(_key(7, 255))
    (36, 255)
    """
    text = str(uuid.UUID(int=i))
    return text if length == 36 else (text + "-" * length)[: length - 9] + f"{i:09d}"


async def _fill(log: FeedbackLog, count: int, length: int, start: int = 0) -> None:
    for first in range(start, start + count, IN_FLIGHT):
        last = min(first + IN_FLIGHT, start + count)
        await asyncio.gather(*(log.append(BATCH, _key(i, length)) for i in range(first, last)))


async def _used(client: aioredis.Redis) -> int:
    return int((await client.info("memory"))["used_memory"])


async def memory(url: str, count: int, length: int) -> tuple[float, float, float]:
    """Bytes per record with its index entry (used_memory), and MEMORY USAGE of one record
    and of the index per entry, for ``count`` keys of ``length`` characters."""
    client = aioredis.Redis.from_url(url, socket_timeout=60)
    await client.flushall()
    keys = ModelKeys("default")
    await client.hset(keys.meta, "t", "0")
    log = _log(client, "default", count + 1)
    await log.append(BATCH, None)  # loads the script before the baseline
    await client.delete(keys.stream)
    before = await _used(client)
    await _fill(log, count, length)
    await client.delete(keys.stream)
    grown = await _used(client) - before
    feedback = FeedbackKeys.of("default", None)
    record = await client.memory_usage(feedback.idempotency(_key(0, length)), samples=0)
    index = await client.memory_usage(feedback.idempotency_index, samples=0)
    await client.aclose()
    return grown / count, float(record or 0), (index or 0) / count


async def latency(url: str, calls: int, most: int) -> dict[str, list[float]]:
    """Microseconds per append: without a key, keyed below the limit, keyed at it."""
    client = aioredis.Redis.from_url(url, socket_timeout=60)
    await client.flushall()
    for model in ("plain", "below", "full"):
        await client.hset(ModelKeys(model).meta, "t", "0")
    logs = {
        "no key": _log(client, "plain", most),
        "keyed": _log(client, "below", 10 * calls + most),
        "keyed at the limit": _log(client, "full", most),
    }
    await _fill(logs["keyed at the limit"], most, 36)
    took: dict[str, list[float]] = {name: [] for name in logs}
    for i in range(-100, calls):  # the first 100 rounds warm up
        for name, log in logs.items():
            key = None if name == "no key" else _key(most + i + 100, 36)
            started = time.perf_counter()
            appended = await log.append(BATCH, key)
            elapsed = (time.perf_counter() - started) * 1e6
            if i >= 0:
                took[name].append(elapsed)
                assert appended.evicted == int(name == "keyed at the limit"), (name, appended)
    await client.aclose()
    return took


def _p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--most", type=int, default=10_000, help="the limit of the latency run")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as scratch,
        RedisServer(Path(scratch) / "redis", persist=False) as server,
    ):
        for length in (36, 255):
            each, record, entry = asyncio.run(memory(server.url, args.keys, length))
            print(
                f"memory, {length}-character keys: {each:.0f} bytes per record with its "
                f"index entry (MEMORY USAGE: record {record:.0f}, index {entry:.0f} per "
                f"entry; {args.keys:,} keys)",
                flush=True,
            )
        took = asyncio.run(latency(server.url, args.calls, args.most))
    for name, values in took.items():
        print(
            f"append, {name}: median {statistics.median(values):.0f} us, p99 "
            f"{_p99(values):.0f} us ({args.calls:,} sequential calls)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
