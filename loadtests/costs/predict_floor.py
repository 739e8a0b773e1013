"""What a lone ``/predict`` costs next to its floor: ``python -m loadtests.costs.predict_floor``.

Issue 51 asks one ``/predict`` at a time to take at most 1.5x a bare FastAPI endpoint's p50 (2x
its p99). Ours reads Redis once per request (``serve.lua``: what makes a prediction exact as of
now) unless the API's copy holds every feature of the request and Redis has pushed no change
to the model since the copy's last call (:mod:`online_ctr.store.change_notices`): the timed
bodies are the same in every block, so after the first block they are that warm case (the
one-pass rows of :mod:`loadtests.bench.vw_daemon` are mostly the other). This puts three
systems side by side on one machine, with one raw TCP client (the requests of
:mod:`loadtests.bench.vw_daemon`, one-example bodies of the Criteo head file):

- ``bare``: the bare endpoint of :mod:`loadtests.common.bare_app` (parse, constant);
- ``bare + Redis PING``: the same endpoint plus the cheapest Redis round trip there is
  (:mod:`loadtests.common.round_trip_app`, a raw ``PING``), to the service's own Redis: the
  floor of any ``/predict`` that asks Redis once a request;
- ``ours``: ``online-ctr serve`` at ``make run``'s defaults from this checkout, after learning
  ``--rows`` rows; with ``--against DIR``, also the same from another checkout, to measure a
  change.

With ``--first-sight`` every block sends rows no block before it sent (each system's own
count of them; distinct rows of the Criteo head file, which ``--rounds 4`` fits: the first
``--rows`` rows are learned, so the model knows their features but the API's copy has read
none of them): the one-pass case. Its rarer features were read from Redis, a call a pass,
until the API read a model that fits its copy whole (:mod:`online_ctr.store.whole_copy`):
then a feature the copy lacks is known absent, and no call is made while nothing changes.

Each round runs a block of ``--single`` requests per system (200 untimed first), in the order
A B C C B A (reversed every other round), so that a drift of the shared machine's load falls
on all alike. Printed: per system the medians over the rounds of its blocks' p50 and p99,
and of its server process's CPU per request (``/proc/PID/stat``: for ours the API process,
without Redis), and the ratios to the bare endpoint's. No targets asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.bench import bench_replay
from loadtests.bench.vw_daemon_parts import http_request, learn_bodies, predict_bodies
from loadtests.bench.vw_daemon_systems import BareEndpoint, Service, tree_cpu_seconds
from loadtests.common import feed
from loadtests.common.stats import percentile
from online_ctr.cli.local import REDIS_PASSWORD_FILE
from testkit.paths import DATA_DIR, ROOT

WARM_UP = 200


@dataclass
class System:
    """One system's requests, how to send one and whose CPU to count, and its blocks."""

    name: str
    send: Callable[[bytes], object]
    requests: list[bytes]
    pid: int
    before_block: Callable[[], None]
    p50_ms: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    #: Requests a block: all of ``requests`` each time if 0, else the next so many of them.
    per_block: int = 0
    _sent: int = 0

    def block(self) -> None:
        """One block: the warm-up, then each request timed."""
        self.before_block()
        requests = self.requests
        if self.per_block:
            requests = requests[self._sent : self._sent + WARM_UP + self.per_block]
            self._sent += len(requests)
        for request in requests[:WARM_UP]:
            self.send(request)
        requests = requests[WARM_UP:] if self.per_block else requests
        cpu = tree_cpu_seconds(self.pid)
        times = []
        for request in requests:
            started = time.perf_counter()
            self.send(request)
            times.append(time.perf_counter() - started)
        per_request = (tree_cpu_seconds(self.pid) - cpu) / len(requests)
        self.p50_ms.append(percentile(times, 50) * 1e3)
        self.p99_ms.append(percentile(times, 99) * 1e3)
        self.cpu_us.append(per_request * 1e6)


def served(service: Service, name: str, bodies: list[bytes], per_block: int) -> System:
    """The service's ``/predict``, sent over a connection opened for each block."""
    requests = [http_request("/predict", body, service.key) for body in bodies]

    def send(request: bytes) -> object:
        return service.exchange(request, 200)

    pid = service.processes["API"]
    return System(name, send, requests, pid, service.reconnect, per_block=per_block)


def endpoint(app: BareEndpoint, name: str, requests: list[bytes], per_block: int) -> System:
    return System(
        name, app.exchange, requests, app.process.pid, app.disconnect, per_block=per_block
    )


def rounds_of(systems: Sequence[System], rounds: int) -> None:
    """Every block, A B C C B A, reversed every other round, each round printed."""
    for index in range(rounds):
        order = list(systems) if index % 2 == 0 else list(reversed(systems))
        for system in [*order, *reversed(order)]:
            system.block()
        print(
            f"  round {index + 1}: "
            + ", ".join(f"{s.name} {s.p50_ms[-1]:.3f} ms" for s in systems),
            file=sys.stderr,
            flush=True,
        )


def table(systems: Sequence[System]) -> str:
    """Medians over the blocks, and their ratios to the first system's."""
    base_p50, base_p99 = (statistics.median(v) for v in (systems[0].p50_ms, systems[0].p99_ms))
    lines = [
        "| system | p50 ms | p99 ms | server CPU us a request | p50 / bare | p99 / bare |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in systems:
        p50, p99, cpu = (statistics.median(v) for v in (s.p50_ms, s.p99_ms, s.cpu_us))
        lines.append(
            f"| {s.name} | {p50:.3f} | {p99:.3f} | {cpu:.0f} | {p50 / base_p50:.2f}x | "
            f"{p99 / base_p99:.2f}x |"
        )
    return "\n".join(lines)


def measure(args: argparse.Namespace) -> list[System]:
    rows = bench_replay.replicate(feed.criteo_rows(args.data_dir), args.rows)
    per_block = args.single if args.first_sight else 0
    blocks = 2 * args.rounds  # each system's: A B C C B A
    bodies = predict_bodies(
        rows[: (WARM_UP + args.single) * blocks if per_block else args.single], 1
    )
    with tempfile.TemporaryDirectory(prefix="octr-predict-floor-") as scratch, ExitStack() as on:
        checkouts = {"ours": ROOT}
        if args.against:
            checkouts[f"ours ({args.against.name})"] = args.against.resolve()
        services: dict[str, Service] = {}
        for index, (name, root) in enumerate(checkouts.items()):
            folder = Path(scratch) / f"serve{index}"
            folder.mkdir()
            services[name] = on.enter_context(Service(folder, root))
        first = next(iter(services.values()))
        password = (first.data_dir / REDIS_PASSWORD_FILE).read_text().strip()
        url = f"redis://:{password}@127.0.0.1:{first.redis_port}"
        bare = on.enter_context(BareEndpoint(Path(scratch)))
        floor = BareEndpoint(
            Path(scratch), "loadtests.common.round_trip_app", {"ROUND_TRIP_REDIS_URL": url}
        )
        on.enter_context(floor)
        for service in services.values():
            learn = [http_request("/learn", body, service.key) for body in learn_bodies(rows, 1000)]
            service.reconnect()
            service.learn(learn, len(rows) - len(rows) % 1000)
        plain = [http_request("/predict", body, first.key) for body in bodies]
        systems = [
            endpoint(bare, "bare", plain, per_block),
            endpoint(floor, "bare + Redis PING", plain, per_block),
            *(served(service, name, bodies, per_block) for name, service in services.items()),
        ]
        rounds_of(systems, args.rounds)
    return systems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.costs.predict_floor", description=__doc__
    )
    parser.add_argument("--rows", type=int, default=20_000, help="Criteo rows learned first")
    parser.add_argument("--single", type=int, default=1000, help="timed requests a block")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of A B C C B A")
    parser.add_argument("--against", type=Path, help="another checkout's serve, measured too")
    parser.add_argument(
        "--first-sight", action="store_true", help="each block sends rows not sent before"
    )
    parser.add_argument("--data-dir", type=Path, default=DATA_DIR)
    args = parser.parse_args(argv)
    if args.rows < 1000 or args.single < 1 or args.rounds < 1:
        parser.error("--rows must be >= 1000; --single and --rounds >= 1")
    distinct = len(feed.criteo_rows(args.data_dir))  # --rows repeats them past that
    if args.first_sight and (WARM_UP + args.single) * 2 * args.rounds > min(args.rows, distinct):
        parser.error(
            f"--first-sight sends (200 + --single) x 2 x --rounds rows, each once: at most "
            f"--rows and the {distinct} rows of the Criteo head file"
        )
    print(table(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
