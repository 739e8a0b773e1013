"""The soak: steady keyed traffic for a long time, every memory figure sampled.

    .venv/bin/python -m loadtests.chaos.soak --minutes 30      # issue 33's run
    .venv/bin/python -m loadtests.chaos.soak --minutes 2 --warm-minutes 1

50 single ``/predict`` a second (joins on: each one a logged impression) and 20 ``/learn`` of
100 Criteo rows a second, each with its own ``Idempotency-Key``, against a private Redis, the
real API and one worker, with bounds small enough to be reached during warm-up. Every 10 s it
samples the API's and the worker's RSS and Redis's ``used_memory``; at the end it prints each
figure's mean over the first and the last fifth after warm-up, their ratio, and the errors.
Flat means each ratio within a few percent of 1 and no error.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from loadtests.chaos.abuse import KEYS, VICTIM_KEY
from loadtests.common.processes import Stack, scratch_dir
from loadtests.common.stats import rss_bytes
from online_ctr.learning.readers import read_examples
from testkit.paths import CRITEO

SETTINGS = {
    "OCTR_JOIN_WINDOW_S": "60",
    "OCTR_MAX_IDEMPOTENCY_KEYS": "5000",
    "OCTR_MAX_PENDING_IMPRESSIONS": "100000",
}
PREDICT_HZ, LEARN_HZ, LEARN_ROWS = 50, 20, 100
SAMPLE_S = 10.0


@dataclass
class Soak:
    """The load's counters and the samples."""

    url: str
    errors: list[str] = field(default_factory=list)
    requests: int = 0
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)

    async def paced(self, hz: float, stop: asyncio.Event, send: object) -> None:
        headers = {"Authorization": f"Bearer {VICTIM_KEY}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30) as client:
            started = time.monotonic()
            for n in itertools.count():
                if stop.is_set():
                    return
                await asyncio.sleep(max(0.0, started + n / hz - time.monotonic()))
                try:
                    reply = await send(client, n)  # type: ignore[operator]
                    if reply.status_code >= 300:
                        self.errors.append(f"{reply.status_code} {reply.text[:200]}")
                except httpx.HTTPError as error:
                    self.errors.append(f"{type(error).__name__}: {error}")
                self.requests += 1


def learn_bodies() -> list[bytes]:
    rows = [
        {"features": dict(x), "label": y}
        for x, y in itertools.islice(read_examples(CRITEO, "criteo"), 10_000)
    ]
    chunks = [rows[i : i + LEARN_ROWS] for i in range(0, len(rows), LEARN_ROWS)]
    return [json.dumps({"examples": chunk}).encode() for chunk in chunks]


async def soak(stack: Stack, url: str, seconds: float) -> Soak:
    run = Soak(url)
    bodies = learn_bodies()
    stop = asyncio.Event()
    json_type = {"Content-Type": "application/json"}

    async def predict(client: httpx.AsyncClient, n: int) -> httpx.Response:
        return await client.post("/predict", json={"features": {"site": f"s{n % 500}"}})

    async def learn(client: httpx.AsyncClient, n: int) -> httpx.Response:
        headers = {**json_type, "Idempotency-Key": secrets.token_hex(16)}
        return await client.post("/learn", content=bodies[n % len(bodies)], headers=headers)

    async def sample() -> None:
        api, worker = stack.children["api"].pid, stack.children["worker0"].pid
        started = time.monotonic()
        while not stop.is_set():
            with stack.client() as redis:
                used = int(redis.info("memory")["used_memory"])
            run.samples.append(
                (time.monotonic() - started, rss_bytes(api), rss_bytes(worker), used)
            )
            await asyncio.sleep(SAMPLE_S)

    tasks = [
        asyncio.ensure_future(run.paced(PREDICT_HZ, stop, predict)),
        asyncio.ensure_future(run.paced(LEARN_HZ, stop, learn)),
        asyncio.ensure_future(sample()),
    ]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return run


def report(run: Soak, warm_s: float) -> str:
    after = [s for s in run.samples if s[0] >= warm_s]
    fifth = max(1, len(after) // 5)
    first, last = after[:fifth], after[-fifth:]
    lines = ["| figure | first fifth after warm-up (MiB) | last fifth (MiB) | last / first |"]
    lines.append("|---|---:|---:|---:|")
    for index, name in ((1, "API RSS"), (2, "worker RSS"), (3, "Redis used_memory")):
        a = sum(s[index] for s in first) / len(first) / 2**20
        b = sum(s[index] for s in last) / len(last) / 2**20
        lines.append(f"| {name} | {a:,.1f} | {b:,.1f} | {b / a:.3f} |")
    lines.append(f"\nrequests: {run.requests:,}; errors: {len(run.errors)} {run.errors[:3]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warm-minutes", type=float, default=8.0)
    args = parser.parse_args(argv)
    with scratch_dir("soak") as work, Stack(Path(work), **SETTINGS) as stack:
        keys = json.dumps(KEYS)
        url = stack.start_api(OCTR_AUTH="on", OCTR_API_KEYS=keys)
        stack.start_workers(1, OCTR_AUTH="on", OCTR_API_KEYS=keys)
        run = asyncio.run(soak(stack, url, 60 * args.minutes))
        stack.check_alive()
    print(report(run, 60 * args.warm_minutes))
    for t, api, worker, used in run.samples[:: max(1, len(run.samples) // 30)]:
        mib = [value / 2**20 for value in (api, worker, used)]
        print(f"{t:7.0f} s  api {mib[0]:7.1f}  worker {mib[1]:7.1f}  redis {mib[2]:7.1f}")
    return 1 if run.errors else 0


if __name__ == "__main__":
    sys.exit(main())
