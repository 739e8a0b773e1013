"""The abuse suite: each attack of issue 33 at full rate against the real service, while a
victim with a key keeps sending single ``/predict`` requests.

    make abuse                                     # = python -m loadtests.chaos.abuse (60 s each)
    .venv/bin/python -m loadtests.chaos.abuse --seconds 10 --attacks headers,idle

It starts a private Redis, the real ``online-ctr api`` (auth on, joins on, four models) and a
worker, with the limits of :data:`LIMITS`. Per attack it reports the API's peak RSS against
its configured bound (:func:`api_bound`), what the attacked store holds against its limit, and
the victim's p99 against its p99 before any attack, with every victim failure counted. Targets
(issue 33): peak RSS <= 1.2x the bound, victim p99 <= 3x unattacked, no victim failure.
``tests/integration/test_abuse.py`` runs every attack for a few seconds and checks the bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import secrets
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from loadtests.common.processes import Stack, scratch_dir
from loadtests.common.stats import percentile, rss_bytes

VICTIM_KEY = "victim-key-" + "v" * 24
PREDICT_KEY = "attacker-predict-key-" + "p" * 16
LEARN_KEY = "attacker-learn-key-" + "l" * 16
KEYS = {VICTIM_KEY: ["predict", "learn", "admin"], PREDICT_KEY: ["predict"], LEARN_KEY: ["learn"]}
MODELS = ("default", "m1", "m2", "m3")
#: The limits the suite runs with: small enough that every attack reaches its bound in seconds.
LIMITS = {
    "OCTR_MAX_IDEMPOTENCY_KEYS": "20000",
    "OCTR_MAX_PENDING_IMPRESSIONS": "20000",
    "OCTR_NAME_TABLE_BYTES": str(32 << 20),
    "OCTR_PREDICT_CACHE_FEATURES": "100000",
    "OCTR_MAX_CONNECTIONS": "400",
    "OCTR_MAX_REQUESTS_PER_KEY": "2",
    "OCTR_MAX_HEADER_BYTES": "16384",
    "OCTR_HEADER_TIMEOUT_S": "2",
    "OCTR_IDLE_TIMEOUT_S": "2",
    "OCTR_JOIN_WINDOW_S": "600",
}
#: What one open connection may hold in the API besides its request: the header limit and
#: the transport's buffers (asyncio reads 64 KiB at a time), rounded up.
CONNECTION_BYTES = 96 * 1024
#: Bytes per feature of the predict copy (the setting's description: 92-154 B).
COPY_FEATURE_BYTES = 160
VICTIM_RATE_HZ = 50


def api_bound(base_rss: int, limits: dict[str, str]) -> int:
    """The API's configured memory bound: its RSS warm and idle, plus every table's budget
    and every connection's share (docs/limits.md)."""
    return (
        base_rss
        + int(limits["OCTR_NAME_TABLE_BYTES"])
        + COPY_FEATURE_BYTES * int(limits["OCTR_PREDICT_CACHE_FEATURES"])
        + CONNECTION_BYTES * int(limits["OCTR_MAX_CONNECTIONS"])
    )


@dataclass
class Victim:
    """Single keyed /predict requests at a steady rate, each one's latency or failure kept."""

    url: str
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        headers = {"Authorization": f"Bearer {VICTIM_KEY}"}
        body = {"features": {"site": "news", "device": "phone"}}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10) as client:
            for _ in range(5):  # a warm connection: its first request is not what is measured
                await client.post("/predict", json=body)
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    reply = await client.post("/predict", json=body)
                    if reply.status_code != 200:
                        self.failures.append(f"{reply.status_code} {reply.text[:120]}")
                except httpx.HTTPError as error:
                    self.failures.append(f"{type(error).__name__}: {error}")
                else:
                    self.latencies_ms.append(1000 * (time.perf_counter() - started))
                await asyncio.sleep(max(0.0, 1 / VICTIM_RATE_HZ - (time.perf_counter() - started)))


Attack = Callable[[str, asyncio.Event], Awaitable[int]]


async def _keyed_loop(
    url: str,
    stop: asyncio.Event,
    key: str,
    send: Callable[[httpx.AsyncClient, int], Awaitable[object]],
) -> int:
    """Eight concurrent senders until ``stop``; returns the requests sent."""
    sent = 0

    async def one_sender(client: httpx.AsyncClient) -> None:
        nonlocal sent
        while not stop.is_set():
            try:
                await send(client, sent)
            except httpx.HTTPError:
                await asyncio.sleep(0.01)
            sent += 1

    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
        await asyncio.gather(*(one_sender(client) for _ in range(8)))
    return sent


async def idempotency_flood(url: str, stop: asyncio.Event) -> int:
    """/learn of one example, each with a new 255-character Idempotency-Key."""

    async def send(client: httpx.AsyncClient, _: int) -> None:
        key = secrets.token_hex(128)[:255]
        example = {"features": {"site": "news"}, "label": 0}
        await client.post("/learn", json=example, headers={"Idempotency-Key": key})

    return await _keyed_loop(url, stop, LEARN_KEY, send)


async def impression_flood(url: str, stop: asyncio.Event) -> int:
    """Batch /predict of 1,000 examples of 20 features each, every one a logged impression."""
    row = {"features": {f"f{j}": f"value-{j}" for j in range(20)}}
    body = json.dumps({"examples": [row] * 1000}).encode()

    async def send(client: httpx.AsyncClient, _: int) -> None:
        await client.post("/predict", content=body, headers={"Content-Type": "application/json"})

    return await _keyed_loop(url, stop, PREDICT_KEY, send)


async def name_flood(url: str, stop: asyncio.Event) -> int:
    """Batch /predict of 1,000 never-seen 200-character names, round robin over the models."""

    async def send(client: httpx.AsyncClient, number: int) -> None:
        prefix = secrets.token_hex(90)
        rows = [{"features": {"user": f"{prefix}{i}"}} for i in range(1000)]
        model = MODELS[number % len(MODELS)]
        await client.post(f"/predict?model={model}", json={"examples": rows})

    return await _keyed_loop(url, stop, PREDICT_KEY, send)


async def _raw_connections(
    url: str,
    stop: asyncio.Event,
    count: int,
    talk: Callable[[asyncio.StreamWriter], Awaitable[None]],
) -> int:
    """``count`` raw connections, each reopened whenever the server closes it; returns how
    many were opened."""
    host, port = url.removeprefix("http://").split(":")
    opened = 0

    async def one() -> None:
        nonlocal opened
        while not stop.is_set():
            try:
                reader, writer = await asyncio.open_connection(host, int(port))
            except OSError:
                await asyncio.sleep(0.05)
                continue
            opened += 1
            talk_task = asyncio.ensure_future(talk(writer))
            closed = asyncio.ensure_future(reader.read())  # b"" once the server closes
            stopped = asyncio.ensure_future(stop.wait())
            tasks = (talk_task, closed, stopped)
            try:
                await asyncio.wait({closed, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                # Every task and the transport ended before the loop does (else a
                # ResourceWarning for each connection still closing).
                await asyncio.gather(*tasks, return_exceptions=True)
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    await asyncio.gather(*(one() for _ in range(count)))
    return opened


async def header_flood(url: str, stop: asyncio.Event) -> int:
    """Eight connections each sending endless 64 KB header lines, no key needed."""
    line = b"X-Flood: " + b"a" * 65536 + b"\r\n"

    async def talk(writer: asyncio.StreamWriter) -> None:
        writer.write(b"POST /predict HTTP/1.1\r\nHost: x\r\n")
        while True:
            writer.write(line)
            await writer.drain()

    return await _raw_connections(url, stop, 8, talk)


async def idle_flood(url: str, stop: asyncio.Event) -> int:
    """1,100 connections that send nothing (more than OCTR_MAX_CONNECTIONS)."""

    async def talk(writer: asyncio.StreamWriter) -> None:
        await asyncio.Event().wait()

    return await _raw_connections(url, stop, 1100, talk)


async def slow_headers(url: str, stop: asyncio.Event) -> int:
    """300 connections each sending one header byte a second (slowloris)."""

    async def talk(writer: asyncio.StreamWriter) -> None:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        while True:
            await asyncio.sleep(1)
            writer.write(b"a")
            await writer.drain()

    return await _raw_connections(url, stop, 300, talk)


ATTACKS: dict[str, Attack] = {
    "idempotency": idempotency_flood,
    "impressions": impression_flood,
    "names": name_flood,
    "headers": header_flood,
    "idle": idle_flood,
    "slow-headers": slow_headers,
}


@dataclass(frozen=True)
class Outcome:
    """What one attack did: the API's peak RSS and its bound, the victim's p99 and failures,
    and what the stores held at the end."""

    attack: str
    sent: int
    peak_rss: int
    bound: int
    p99_ms: float
    victim_requests: int
    victim_failures: list[str]
    held: dict[str, float]

    def row(self, unattacked_p99_ms: float) -> str:
        ratio = self.peak_rss / self.bound
        p99_ratio = self.p99_ms / unattacked_p99_ms
        held = ", ".join(f"{name} {value:,.0f}" for name, value in self.held.items())
        return (
            f"| {self.attack} | {self.sent:,} | {self.peak_rss / 2**20:,.0f} | "
            f"{self.bound / 2**20:,.0f} | {ratio:.2f} | {self.p99_ms:.1f} | {p99_ratio:.2f} | "
            f"{self.victim_requests:,} | {len(self.victim_failures)} | {held} |"
        )


class RssSampler:
    """The peak RSS of a process, sampled every 50 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.pid))


def held(url: str) -> dict[str, float]:
    """The bounded stores' gauges on /metrics (summed over models)."""
    text = httpx.get(
        f"{url}/metrics", headers={"Authorization": f"Bearer {VICTIM_KEY}"}, timeout=30
    ).text
    names = {
        "online_ctr_idempotency_keys": "idempotency records",
        "online_ctr_pending_impressions": "pending impressions",
        "online_ctr_name_table_bytes": "name-table bytes",
        "online_ctr_predict_copy_features": "copy features",
        "online_ctr_redis_memory_bytes": "Redis bytes",
    }
    found: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name in names and not line.startswith("#"):
            found[names[name]] = found.get(names[name], 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def victim_alone(url: str, seconds: float) -> Victim:
    """The victim for ``seconds``, in a process of its own (:func:`in_its_own_process`)."""

    async def run() -> Victim:
        stop = asyncio.Event()
        victim = Victim(url)
        task = asyncio.ensure_future(victim.run(stop))
        await asyncio.sleep(seconds)
        stop.set()
        await task
        return victim

    return asyncio.run(run())


async def in_its_own_process(url: str, seconds: float) -> Victim:
    """The victim run in another process: in the attacker's event loop, the attack's own work
    (building bodies, a thousand sockets) delayed the victim's requests and counted in its
    latencies."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return await asyncio.wrap_future(pool.submit(victim_alone, url, seconds))


async def attacked(url: str, pid: int, bound: int, name: str, seconds: float) -> Outcome:
    """Run one attack for ``seconds`` beside the victim."""
    stop = asyncio.Event()
    with RssSampler(pid) as sampler:
        attack_task = asyncio.ensure_future(ATTACKS[name](url, stop))
        # The attack goes on until the victim, started meanwhile, has run its whole time.
        victim = await in_its_own_process(url, seconds)
        stop.set()
        sent = await attack_task
    return Outcome(
        name,
        sent,
        sampler.peak,
        bound,
        percentile(victim.latencies_ms, 99) if victim.latencies_ms else float("inf"),
        len(victim.latencies_ms) + len(victim.failures),
        victim.failures,
        await asyncio.to_thread(held, url),
    )


async def unattacked_p99(url: str, seconds: float) -> float:
    victim = await in_its_own_process(url, seconds)
    if victim.failures:
        raise RuntimeError(f"the victim failed before any attack: {victim.failures[:3]}")
    return percentile(victim.latencies_ms, 99)


def start_service(stack: Stack) -> str:
    """The API with the suite's limits and four models, and one worker; returns its URL."""
    keys = json.dumps(KEYS)
    url = stack.start_api(OCTR_AUTH="on", OCTR_API_KEYS=keys)
    stack.start_workers(1, OCTR_AUTH="on", OCTR_API_KEYS=keys)
    admin = {"Authorization": f"Bearer {VICTIM_KEY}"}
    for model in MODELS[1:]:
        reply = httpx.put(f"{url}/models/{model}", json={"rule": "ftrl"}, headers=admin)
        reply.raise_for_status()
    return url


def run(attacks: list[str], seconds: float, warm_s: float) -> tuple[float, int, list[Outcome]]:
    """Every attack in turn against one service; the unattacked p99, the API's base RSS and
    the outcomes."""
    with scratch_dir("abuse") as work, Stack(Path(work), **LIMITS) as stack:
        url = start_service(stack)
        pid = stack.children["api"].pid
        base_p99 = asyncio.run(unattacked_p99(url, warm_s))
        base_rss = rss_bytes(pid)
        bound = api_bound(base_rss, LIMITS)
        outcomes = []
        for name in attacks:
            outcome = asyncio.run(attacked(url, pid, bound, name, seconds))
            stack.check_alive()
            outcomes.append(outcome)
            print(outcome.row(base_p99), flush=True)
        return base_p99, base_rss, outcomes


HEADER = (
    "| attack | attack requests/connections | API peak RSS (MiB) | bound (MiB) | peak/bound | "
    "victim p99 (ms) | p99/unattacked | victim requests | victim failures | held at the end |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="each attack's duration")
    parser.add_argument("--warm-seconds", type=float, default=10.0, help="the unattacked run")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated")
    args = parser.parse_args(argv)
    attacks = [name for name in args.attacks.split(",") if name]
    unknown = sorted(set(attacks) - set(ATTACKS))
    if unknown:
        parser.error(f"unknown attacks {unknown}; choose among {', '.join(ATTACKS)}")
    print(f"limits: {LIMITS}\n{HEADER}", flush=True)
    base_p99, base_rss, outcomes = run(attacks, args.seconds, args.warm_seconds)
    print(f"\nunattacked victim p99: {base_p99:.1f} ms; API RSS warm: {base_rss / 2**20:.0f} MiB")
    failed = [o for o in outcomes if o.victim_failures or o.peak_rss > 1.2 * o.bound]
    for outcome in failed:
        print(f"{outcome.attack}: victim failures {outcome.victim_failures[:3]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
