"""Where Redis's CPU goes while ``online-ctr serve`` learns the rows of ``make bench-vw-daemon``
(issue 51: Redis, one thread, is the bottleneck of learning through ``/learn``).

    python -m loadtests.costs.learning_redis_cost learn --rows 200000 --env OCTR_APPLY_LINGER_MS=0
    python -m loadtests.costs.learning_redis_cost learn --slowlog      # each script's share too
    python -m loadtests.costs.learning_redis_cost apply --features 8131 --aof

``learn`` starts the service as the benchmark does (:class:`Service`, with ``--env`` settings on
top), sends the benchmark's 1,000-example ``/learn`` bodies and waits until the model's step
covers them, then (a second later, for the last applies) prints per example: each process's
CPU (``/proc/PID/stat``) and Redis's own accounting, ``INFO commandstats`` (an ``EVALSHA``'s
time includes the commands its script calls, which are counted under their own names too).
With ``--slowlog`` every command is logged (``slowlog-log-slower-than 0``, which costs Redis
time itself) and the ``EVALSHA`` calls are told apart by script (``append``, ``finalize``,
``apply``, ``read`` ...).

``apply`` times ``apply.lua`` alone on a fresh ``redis-server``: ``--features`` random features
(8,131 is what the benchmark's first 1,000 rows touch) written by ``--commits`` commits, all
into hashes that exist: Redis's CPU per feature written, with the append-only file or without;
``--script`` times a changed copy of ``apply.lua`` instead (one that skips its ``HSET``, say),
to tell the script's own work from the commands it calls.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import redis
import redis.asyncio as aredis

from loadtests.bench.vw_daemon import load
from loadtests.bench.vw_daemon_parts import http_request
from loadtests.bench.vw_daemon_systems import Service
from loadtests.common.stats import cpu_seconds
from online_ctr.store import scripts as store_scripts
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Layout
from online_ctr.store.scripts import Scripts
from online_ctr.store.shards import StateShards
from testkit.paths import DATA_DIR, ROOT
from testkit.ports import free_port

#: Seconds waited after the step covers every row, for the last applies (which linger).
SETTLE_S = 1.0
#: Most commands a ``--slowlog`` run keeps.
SLOWLOG_MAX = 4_000_000


class Configured(Service):
    """The benchmark's service with some settings of ours on top."""

    def __init__(self, folder: Path, settings: dict[str, str]) -> None:
        super().__init__(folder)
        self.settings = settings

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.settings}


def script_names() -> dict[str, str]:
    """Each store script's SHA1 (as registered, prelude included) -> its name."""
    folder = ROOT / "online_ctr" / "store"
    return {
        hashlib.sha1(store_scripts._script(path.stem).encode()).hexdigest(): path.stem
        for path in folder.glob("*.lua")
    }


def by_script(log: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """SLOWLOG entries summed by command, ``EVALSHA`` by script: calls and microseconds."""
    names, sums = script_names(), collections.defaultdict(lambda: [0, 0])
    for entry in log:
        words = entry["command"].split()
        name = _text(words[0]).upper()
        if name == "EVALSHA" and len(words) > 1:
            name = "EVALSHA " + names.get(_text(words[1]), _text(words[1])[:12])
        sums[name][0] += 1
        sums[name][1] += entry["duration"]
    return {name: (calls, usec) for name, (calls, usec) in sums.items()}


def _text(word: bytes | str) -> str:
    return word.decode(errors="replace") if isinstance(word, bytes) else word


def learn(rows: int, settings: dict[str, str], slowlog: bool) -> None:
    """Learn ``rows`` rows through ``/learn`` and print where Redis's time went."""
    work = load(DATA_DIR, rows, 1, 1)
    rows = len(work.learn) * 1000
    with (
        tempfile.TemporaryDirectory(prefix="octr-redis-cost-") as scratch,
        Configured(Path(scratch), settings) as service,
    ):
        client = service.redis
        requests = [http_request("/learn", body, service.key) for body in work.learn]
        if slowlog:
            client.config_set("slowlog-max-len", SLOWLOG_MAX)
            client.config_set("slowlog-log-slower-than", 0)
        client.config_resetstat()
        client.slowlog_reset()
        before = {**service.cpu(), "load generator": cpu_seconds(os.getpid())}
        seconds, _ = service.learn(requests, rows)
        learned = service.cpu()["Redis"]
        time.sleep(SETTLE_S)  # the last commits' applies, which may linger after the step
        after = {**service.cpu(), "load generator": cpu_seconds(os.getpid())}
        client.config_set("slowlog-log-slower-than", 10_000)
        stats = client.info("commandstats")
        log = client.slowlog_get(SLOWLOG_MAX) if slowlog else []
    print(f"{rows:,} rows learned in {seconds:.2f} s ({rows / seconds:,.0f}/s), {settings}")
    print(f"Redis CPU us per example until learned: {(learned - before['Redis']) / rows * 1e6:.2f}")
    print(f"and {SETTLE_S:.0f} s later (with the last applies), like everything below:")
    cpu = (f"{name} {(after[name] - before[name]) / rows * 1e6:.2f}" for name in before)
    print("CPU us per example: " + ", ".join(cpu))
    print("INFO commandstats, per example (EVALSHA includes what its scripts call):")
    for name, stat in sorted(stats.items(), key=lambda item: -item[1]["usec"])[:15]:
        print(f"  {name[8:]:24} calls {stat['calls']:>9,}  us/example {stat['usec'] / rows:7.3f}")
    if log:
        print(f"SLOWLOG ({len(log):,} commands, each logged: slower), per example:")
        for name, (calls, usec) in sorted(by_script(log).items(), key=lambda i: -i[1][1])[:15]:
            print(f"  {name:24} calls {calls:>9,}  us/example {usec / rows:7.3f}")


async def apply_cost(features: int, commits: int, aof: bool, variant: Path | None) -> float:
    """Redis CPU microseconds per feature written by ``apply.lua``, or by ``variant`` (a
    changed copy of it, with the same prelude), as the module's doc says."""
    folder, port = tempfile.mkdtemp(prefix="octr-apply-cost-"), free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--dir", folder, "--save", "",
         "--appendonly", "yes" if aof else "no", "--appendfsync", "everysec"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = aredis.Redis(port=port)
        await _until_up(client)
        layout, keys = Layout(1 << 18, 64, 64, 3), ModelKeys("default")
        scripts = Scripts.register(client)
        if variant is not None:
            prelude = (
                store_scripts._source("checks.lua") + "\n" + store_scripts._source("buckets.lua")
            )
            scripts = replace(
                scripts, apply=client.register_script(prelude + "\n" + variant.read_text())
            )
        shards = StateShards(client, keys, layout, scripts)
        for shard in range(layout.shards):
            await client.set(keys.shard(shard).filter, bytes(layout.filter_bytes))
        rng = np.random.default_rng(1)
        ids = rng.integers(0, 2**63, features, dtype=np.uint64)
        runs = layout.records(ids, rng.random((features, 3)), np.zeros(features, np.bool_))
        await shards.apply(1, runs)  # the hashes made once, as after a first commit
        started = cpu_seconds(server.pid)
        for seq in range(2, commits + 2):
            await shards.apply(seq, runs)
        spent = cpu_seconds(server.pid) - started
        await client.aclose()
    finally:
        server.terminate()
        server.wait()
    return spent / (features * commits) * 1e6


async def _until_up(client: aredis.Redis) -> None:
    for _ in range(100):
        try:
            await client.ping()
            return
        except redis.ConnectionError:
            await asyncio.sleep(0.05)
    raise RuntimeError("redis-server did not start")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.costs.learning_redis_cost", description=__doc__
    )
    modes = parser.add_subparsers(dest="mode", required=True)
    learning = modes.add_parser("learn", help="the service learning the benchmark's rows")
    learning.add_argument("--rows", type=int, default=200_000)
    learning.add_argument("--env", action="append", default=[], help="NAME=VALUE, a setting")
    learning.add_argument("--slowlog", action="store_true", help="time each script apart")
    applying = modes.add_parser("apply", help="apply.lua alone, per feature written")
    applying.add_argument("--features", type=int, default=8131)
    applying.add_argument("--commits", type=int, default=100)
    applying.add_argument("--aof", action="store_true", help="with the append-only file")
    applying.add_argument("--script", type=Path, help="a changed apply.lua to time instead")
    args = parser.parse_args(argv)
    if args.mode == "learn":
        learn(args.rows, dict(pair.split("=", 1) for pair in args.env), args.slowlog)
    else:
        per = asyncio.run(apply_cost(args.features, args.commits, args.aof, args.script))
        print(f"apply.lua: Redis CPU {per:.3f} us per feature written (aof: {args.aof})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
