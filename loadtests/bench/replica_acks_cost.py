"""What replicated acknowledgements (``OCTR_REPLICA_ACKS``) cost, on a local Redis Cluster of 3
masters and 3 replicas: ``/learn`` ingest through the real API (wrk, no worker running) and
the real worker's drain of a pre-filled stream, each with the acknowledgements off (0) and on
(1), in paired A B B A order so that drift of the machine falls on both alike.

    python -m loadtests.bench.replica_acks_cost            # -> docs/benchmarks-acks.md
    python -m loadtests.bench.replica_acks_cost --quick    # short runs, printed only

Ingest is measured with bodies of 1,000 examples (the API's limit, as ``make bench``) and of
10 (where the wait, once per request, weighs most); the drain with entries of 50 examples.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loadtests.bench.ingest import CONNECTIONS
from loadtests.chaos.chaos_cluster_parts import cluster_client, service_on
from loadtests.common import feed, tools
from loadtests.common.processes import Stack
from loadtests.common.wrk_runs import Load, load, write_learn_bodies
from testkit.local_cluster import LocalCluster
from testkit.paths import DATA_DIR, ROOT

REPORT = ROOT / "docs" / "benchmarks-acks.md"
#: Per figure, the settings in A B B A order, twice.
ORDER = ("0", "1", "1", "0") * 2


@dataclass(frozen=True)
class Run:
    """One measurement: examples per second, and wrk's latencies for ingest."""

    acks: str
    per_second: float
    p50_ms: float = 0.0
    p99_ms: float = 0.0


def fresh_model(stack: Stack, cluster: LocalCluster) -> None:
    """An empty cluster but for the model, created by a worker that then stops."""
    cluster.flushall()
    with cluster_client(cluster) as client:
        stack.start_workers(1)
        feed.wait_for_worker(client, stack.check_alive)
    stack.stop(*stack.workers())


def ingest(
    stack: Stack, cluster: LocalCluster, rows: list[feed.Row], body: int, acks: str, s: float
) -> Run:
    """wrk posting ``body``-example bodies for ``s`` seconds to an API with ``acks``, on a
    fresh model (the stream of earlier runs would fill the cluster's memory)."""
    fresh_model(stack, cluster)
    url = stack.start_api(OCTR_REPLICA_ACKS=acks)
    bodies = write_learn_bodies(stack.work_dir / f"learn-{body}.jsonl", rows, body)
    how = Load(bodies, body, CONNECTIONS, s)
    wrk = load("learn", f"{url}/learn", how, {"api": stack.children["api"].pid}).wrk
    stack.stop("api")
    return Run(acks, wrk.requests * body / wrk.seconds, wrk.p50_ms, wrk.p99_ms)


def drain(
    stack: Stack, cluster: LocalCluster, rows: list[feed.Row], n: int, acks: str, per_entry: int
) -> Run:
    """One worker with ``acks`` learning ``n`` examples written to the stream before it starts;
    timed from its first heartbeat to the model's step reaching ``n``."""
    cluster.flushall()
    with cluster_client(cluster) as client:
        feed.feed(client, feed.entries(rows, per_entry), n // per_entry)
        stack.start_workers(1, OCTR_REPLICA_ACKS=acks)
        feed.wait_for_worker(client, stack.check_alive)
        started = time.perf_counter()
        ended, _ = feed.wait_for_step(client, n, max(300.0, n / 200), stack.check_alive)
    stack.stop(*stack.workers())
    return Run(acks, n / (ended - started))


def paired(measure: Callable[[str], Run]) -> dict[str, list[Run]]:
    """The runs of ``measure(acks)`` in A B B A order, by setting."""
    runs: dict[str, list[Run]] = {"0": [], "1": []}
    for acks in ORDER:
        run = measure(acks)
        runs[acks].append(run)
        print(f"  acks={acks}: {run.per_second:,.0f}/s", flush=True)
    return runs


def row(what: str, runs: dict[str, list[Run]], latency: bool) -> str:
    off = statistics.median(r.per_second for r in runs["0"])
    on = statistics.median(r.per_second for r in runs["1"])
    spread = " / ".join(
        ", ".join(f"{r.per_second / 1000:,.0f}k" for r in runs[acks]) for acks in ("0", "1")
    )
    cells = [what, f"{off:,.0f}", f"{on:,.0f}", f"{on / off:.2f}", spread]
    if latency:
        for acks in ("0", "1"):
            p50 = statistics.median(r.p50_ms for r in runs[acks])
            p99 = statistics.median(r.p99_ms for r in runs[acks])
            cells.append(f"{p50:.1f} / {p99:.1f}")
    else:
        cells += ["", ""]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs; no report written")
    args = parser.parse_args()
    seconds, n = (3.0, 20_000) if args.quick else (10.0, 200_000)
    tools.require("wrk")
    rows = feed.criteo_rows(DATA_DIR)
    lines = []
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(Path(tmp) / "cluster") as cluster:
        work = Path(tmp) / "stack"
        work.mkdir()
        with service_on(cluster, work) as stack:
            for body in (1000, 10):
                print(f"ingest, {body}-example bodies", flush=True)
                runs = paired(lambda acks, b=body: ingest(stack, cluster, rows, b, acks, seconds))
                lines.append(row(f"`/learn` ingest, {body}-example bodies", runs, True))
            print("drain, 50-example entries", flush=True)
            runs = paired(lambda acks: drain(stack, cluster, rows, n, acks, 50))
            lines.append(row(f"worker drain of {n:,} examples, 50 an entry", runs, False))
    table = "\n".join(
        [
            "| examples/s (median) | acks 0 | acks 1 | ratio | every run, acks 0 / acks 1 "
            "| p50 / p99 ms, acks 0 | acks 1 |",
            "|---|---:|---:|---:|---|---:|---:|",
            *lines,
        ]
    )
    print(table)
    if not args.quick:
        REPORT.write_text(report(table, seconds))
        print(f"wrote {REPORT}")
    return 0


def report(table: str, seconds: float) -> str:
    return f"""# What replicated acknowledgements cost

Written by `make bench-acks` (`python -m loadtests.bench.replica_acks_cost`) on a local Redis
Cluster of 3 masters and 3 replicas on this machine (2 cores shared by the cluster, the API or
worker, and wrk). Each figure is the median of four runs per setting, in A B B A order twice;
ingest runs last {seconds:g} s each with {CONNECTIONS} connections and no worker running.
`OCTR_REPLICA_ACKS=1` (the default on Redis Cluster) waits, per `/learn` request, for the
master's replica to hold the append; the worker waits, per apply, for the log side's replica
to hold the finalize and for the shards' replicas to hold the apply (off the learner's path:
applies overlap the learning of the next groups). What the setting promises:
[Persistence and replication](operations/persistence.md#replicated-acknowledgements).

{table}
"""


if __name__ == "__main__":
    raise SystemExit(main())
