"""What recording feature names (a model's ``feature_names`` option) costs: Redis memory per
name, and ``/learn`` and ``/predict`` time with the record on and off, in paired A B B A order
(drift of the machine falls on both alike), through the real app in-process on a real Redis.

    python -m loadtests.costs.feature_names_cost            # prints the figures
    python -m loadtests.costs.feature_names_cost --rounds 1 # one A B B A round

Each run starts a fresh app on an emptied Redis, so every name is new to its hashers: the
recording's whole cost (first hashes, the background writes) falls inside the run. A run
posts ``--bodies`` /learn bodies of 1,000 Criteo rows (values as strings: the scanned path),
then 2,000 single-example /predict requests, and with the record on waits for the
background writes to end before its clock stops; then both again, every name seen before.
The clock is the process's CPU time (client and app share the process; the machine's other
load moves wall time by 2x on 2 cores, CPU time much less); Redis's own time is not in it:
the memory figure's ``record`` of every name is the Redis side, printed with it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import redis
import redis.asyncio
from prometheus_client import CollectorRegistry

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.settings import Settings
from online_ctr.learning.features import feature_id
from online_ctr.learning.readers import read_examples
from online_ctr.store.feature_names import FeatureNames
from online_ctr.store.keys import ModelKeys
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.api.name_record import recorder_of
from service.app import create_app
from testkit.paths import CRITEO

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

ORDER = ("off", "on", "on", "off")
JSON = {"Content-Type": "application/json"}
Rows = list[dict[str, str]]


def criteo_rows(count: int) -> Rows:
    """Criteo rows with every value as a string (what the compiled scan reads)."""
    rows = itertools.islice(read_examples(CRITEO, "criteo"), count)
    return [{k: str(v) for k, v in x.items()} for x, _ in rows]


def bytes_per_name(url: str, rows: Rows) -> tuple[int, float, float, float]:
    """Names recorded from ``rows`` through FeatureNames, and Redis's bytes per name by
    ``MEMORY USAGE`` of the hash and by ``used_memory`` before and after, and their mean
    length."""
    names = sorted({f"{k}={v}".encode() for x in rows for k, v in x.items()})
    plain: Any = redis.Redis.from_url(url)
    plain.flushall()

    async def record() -> None:
        client = redis.asyncio.Redis.from_url(url)
        settings = Settings(redis_url=url)
        store = ModelStore(client, model_spec(settings))
        await store.ensure()
        before = plain.info("memory")["used_memory"]
        record = FeatureNames(client, store.keys, 10_000_000)
        ids = [feature_id(n.decode()) for n in names]
        started = time.perf_counter()
        await record.record(ids, names)
        print(f"recording {len(ids)} names: {time.perf_counter() - started:.3f} s wall")
        plain.set("used-after", plain.info("memory")["used_memory"] - before)
        await client.aclose()

    asyncio.run(record())
    key = ModelKeys("default").feature_names
    usage = plain.memory_usage(key, samples=0)
    used = int(plain.get("used-after"))
    count = plain.hlen(key)
    plain.close()
    return count, usage / count, used / count, sum(map(len, names)) / len(names)


class Run(NamedTuple):
    """Seconds per /learn body and per single /predict with every name new, and per request
    of both (/learn bodies and single /predict, sent again) with every name seen before."""

    learn_new: float
    predict_new: float
    seen: float


def run(url: str, on: bool, bodies: list[bytes], singles: list[bytes]) -> Run:
    """One run, the record ``on`` or off."""
    plain: Any = redis.Redis.from_url(url)
    plain.flushall()
    plain.close()
    settings = Settings(redis_url=url, auth="off", feature_names=on, feature_names_max=10_000_000)
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        recorder = recorder_of(client.app.state.served)  # type: ignore[attr-defined]
        started = time.process_time()
        for body in bodies:
            assert client.post("/learn", content=body, headers=JSON).status_code == 202
        if recorder is not None:
            client.portal.call(recorder.flush)  # type: ignore[union-attr]
        learned = time.process_time()
        for body in singles:
            assert client.post("/predict", content=body, headers=JSON).status_code == 200
        if recorder is not None:
            client.portal.call(recorder.flush)  # type: ignore[union-attr]
        predicted = time.process_time()
        for body in bodies:  # again: every name seen before, the steady state of a stream
            assert client.post("/learn", content=body, headers=JSON).status_code == 202
        for body in singles:
            assert client.post("/predict", content=body, headers=JSON).status_code == 200
        ended = time.process_time()
    return Run(
        (learned - started) / len(bodies),
        (predicted - learned) / len(singles),
        (ended - predicted) / (len(bodies) + len(singles)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=8, help="/learn bodies of 1,000 rows")
    parser.add_argument("--rounds", type=int, default=2, help="A B B A rounds")
    args = parser.parse_args()
    rows = criteo_rows(1000 * args.bodies + 2000)
    learn_rows, predict_rows = rows[: 1000 * args.bodies], rows[1000 * args.bodies :]
    bodies = [
        orjson.dumps({"examples": [{"features": x, "label": 0} for x in learn_rows[i : i + 1000]]})
        for i in range(0, len(learn_rows), 1000)
    ]
    singles = [orjson.dumps({"features": x}) for x in predict_rows]
    with tempfile.TemporaryDirectory() as work, RedisServer(Path(work), persist=False) as server:
        count, usage, used, length = bytes_per_name(server.url, learn_rows)
        print(
            f"{count} names of {length:.1f} bytes on average: MEMORY USAGE {usage:.1f} B/name, "
            f"used_memory {used:.1f} B/name"
        )
        times: dict[str, list[Run]] = {"off": [], "on": []}
        for arm in ORDER * args.rounds:
            times[arm].append(run(server.url, arm == "on", bodies, singles))
            print(f"  {arm}: {_shown(times[arm][-1])}")
    for arm, runs in times.items():
        median = Run(*(statistics.median(getattr(r, f) for r in runs) for f in Run._fields))
        print(f"{arm}, median of {len(runs)}: {_shown(median)}")


def _shown(run: Run) -> str:
    return (
        f"new names: /learn {run.learn_new * 1e3:.2f} ms per 1,000-row body, /predict "
        f"{run.predict_new * 1e6:.0f} us; names seen: {run.seen * 1e6:.0f} us per request"
    )


if __name__ == "__main__":
    main()
