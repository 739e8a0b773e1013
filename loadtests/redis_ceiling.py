"""Redis's own ceiling for the commands the worker sends, by ``redis-benchmark`` with
pipelining, and the worker's Redis operations per second measured against it.

Each command is benchmarked alone (``-P 16``, 50 clients, 4,096 random keys or fields), with
values the size the worker uses: a state bucket is a string of 32-byte records (the 8-byte
feature id, FTRL's ``z`` and ``n`` and the count as float64), about 11 of them per bucket
once the Criteo file is learned with the default 4,096 buckets; stream entries are the size
of a single-example Criteo ``/learn``. ``EVALSHA`` runs a one-line script around ``GET``: the
price of entering Lua. Commands the worker sends that are not benchmarked here (``XACK``,
``ZADD`` ...) are rare next to these and are given the ``SET`` figure
(:func:`loadtests.stats.mix_ceiling`). One worker operation may carry many keys (an ``MGET``
of up to 1,000 buckets) where the benchmark's carries one, so the ratio understates how busy
Redis is; the cores Redis used during the run say that directly.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

import redis

from loadtests import tools
from loadtests.stats import mix_ceiling

KEY = "octr-bench:s:__rand_int__"
SCRIPT = "return redis.call('GET', KEYS[1])"
#: Bytes of a state bucket: 11 records of 32 bytes.
BUCKET_BYTES = 11 * 32
#: Bytes of a single-example Criteo stream entry (header, label, row pointers, 40 ids).
ENTRY_BYTES = 340
FALLBACK = "set"


def commands(sha: str) -> dict[str, list[str]]:
    """The command line benchmarked for each command name (as in ``INFO commandstats``)."""
    return {
        "set": ["SET", KEY, "v" * BUCKET_BYTES],
        "mget": ["MGET", KEY],
        "hget": ["HGET", "octr-bench:meta", "t"],
        "hmget": ["HMGET", "octr-bench:meta", "t", "epoch"],
        "xadd": ["XADD", "octr-bench:stream", "MAXLEN", "~", "10000", "*", "b", "e" * ENTRY_BYTES],
        "evalsha": ["EVALSHA", sha, "1", KEY],
    }


def measure(client: redis.Redis, port: int, requests: int) -> dict[str, float]:
    """Ops/s of each command, pipelined 16 deep; the benchmark's keys are deleted after."""
    sha = str(client.script_load(SCRIPT))
    ceiling = {}
    try:
        for name, command in commands(sha).items():
            argv = tools.redis_benchmark_command(port, command, requests)
            done = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=300)
            (rps,) = tools.parse_redis_benchmark(done.stdout).values()
            ceiling[name] = rps
    finally:
        keys = list(client.scan_iter(match="octr-bench:*", count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
    return ceiling


def worker_ratio(calls: Mapping[str, int], seconds: float, ceiling: Mapping[str, float]) -> float:
    """The workers' Redis ops/s over Redis's ceiling for the same mix of commands."""
    return sum(calls.values()) / seconds / mix_ceiling(calls, ceiling, FALLBACK)
