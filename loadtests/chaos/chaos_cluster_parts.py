"""The parts of the cluster chaos suite (:mod:`loadtests.chaos.chaos_cluster`): which node of a
local Redis Cluster holds what of a model, the faults done to those nodes, the model's step
``t`` watched through them, and the service started on the cluster.

Where a key lives is asked of the cluster itself (``CLUSTER KEYSLOT``, then the master that
``CLUSTER NODES`` gives that slot), never of a client's slot map, which is what a failover
makes stale.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
from redis.cluster import ClusterNode

from loadtests.common.processes import Stack
from online_ctr.store.keys import ModelKeys, RegistryKeys
from testkit.local_cluster import LocalCluster

#: The model the feeders send to (the API's default).
MODEL = "default"
#: Short socket timeouts: a frozen node must not hold up a question another node can answer.
PROBE_TIMEOUT_S = 0.3


def node_client(port: int) -> redis.Redis:
    return redis.Redis(
        port=port, socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S
    )


def cluster_client(cluster: LocalCluster) -> redis.RedisCluster:
    """A synchronous cluster client of ``cluster`` (the suite's own reads, not the service's),
    started from every live node: the first one may be the frozen or the dead one."""
    return redis.RedisCluster(
        startup_nodes=[ClusterNode("127.0.0.1", port) for port in cluster.running()],  # type: ignore[no-untyped-call]
        socket_timeout=1.0,
        socket_connect_timeout=PROBE_TIMEOUT_S,
    )


def cluster_nodes(cluster: LocalCluster) -> dict[int, dict[str, Any]]:
    """``CLUSTER NODES`` by port, from the first live node that answers (a frozen one
    does not)."""
    for port in cluster.running():
        with contextlib.suppress(redis.RedisError), node_client(port) as client:
            nodes: dict[str, dict[str, Any]] = client.execute_command("CLUSTER NODES")
            return {int(address.rsplit(":", 1)[1]): node for address, node in nodes.items()}
    raise RuntimeError("no node of the cluster answers CLUSTER NODES")


def owner(cluster: LocalCluster, key: str) -> int:
    """The port of the master serving ``key``'s slot now."""
    nodes = cluster_nodes(cluster)
    for port in cluster.running():
        with contextlib.suppress(redis.RedisError), node_client(port) as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
            break
    else:
        raise RuntimeError("no node of the cluster answers CLUSTER KEYSLOT")
    for port, node in nodes.items():
        serving = "master" in node["flags"] and "fail" not in node["flags"]
        if serving and any(int(low) <= slot <= int(high) for low, high in node["slots"]):
            return port
    raise RuntimeError(f"no master serves slot {slot} of {key}")


def key_on(cluster: LocalCluster, master: int) -> str:
    """A key of the suite's own (no model's) that ``master`` serves."""
    for index in range(10_000):
        key = f"chaos:{{fill-{index}}}"
        if owner(cluster, key) == master:
            return key
    raise RuntimeError(f"no key found for the master on {master}")


def replica_of(cluster: LocalCluster, master: int) -> int:
    """The port of ``master``'s replica (each master has one in the suite's cluster)."""
    nodes = cluster_nodes(cluster)
    master_id = nodes[master]["node_id"]
    return next(port for port, node in nodes.items() if node["master_id"] == master_id)


def is_master(port: int) -> bool:
    """Whether the node on ``port`` says it is a master (False if it does not answer)."""
    with contextlib.suppress(redis.RedisError), node_client(port) as client:
        role: str = client.info("replication")["role"]
        return role == "master"
    return False


@dataclass(frozen=True)
class Roles:
    """The masters a scenario targets: the one of the model's log side (meta, stream,
    idempotency records, lease, ``t``), and one that holds only state shards."""

    log_side: int
    state_only: int
    state_shards: int  # the model's shards on ``state_only``


def roles(cluster: LocalCluster, shards: int, model: str = MODEL) -> Roles:
    """Which master holds what of ``model`` (``shards`` state shards), by its key layout."""
    keys = ModelKeys(model)
    log_side = owner(cluster, keys.meta)
    registry = owner(cluster, RegistryKeys.models)
    by_master: dict[int, int] = {}
    for index in range(shards):
        port = owner(cluster, keys.shard(index).applied)
        by_master[port] = by_master.get(port, 0) + 1
    # Rather one that holds the registry neither: a state-only master means state only.
    others = sorted(port for port in by_master if port != log_side)
    state_only = next((port for port in others if port != registry), others[0])
    return Roles(log_side, state_only, by_master[state_only])


@dataclass
class Fault:
    """One disruption: when it began, and when the replica it waited for took over."""

    at: float  # time.monotonic() of the kill, or of the SIGSTOP
    promoted_s: float | None = None  # from ``at`` until the replica answered as a master


class Faults:
    """What the scenarios do to the cluster's nodes. Each records its :class:`Fault`."""

    def __init__(
        self, cluster: LocalCluster, fill_mb: int = 32, promotion_timeout_s: float = 30.0
    ) -> None:
        self.cluster = cluster
        self.fill_mb = fill_mb
        self.promotion_timeout_s = promotion_timeout_s
        self.frozen: set[int] = set()

    def freeze(self, port: int) -> None:
        self.cluster.kill(port, signal.SIGSTOP)
        self.frozen.add(port)

    def thaw(self, port: int) -> None:
        self.cluster.kill(port, signal.SIGCONT)
        self.frozen.discard(port)

    def thaw_all(self) -> None:
        for port in list(self.frozen):
            self.thaw(port)

    def _promoted(self, fault: Fault, replica: int) -> None:
        deadline = fault.at + self.promotion_timeout_s
        while time.monotonic() < deadline:
            if is_master(replica):
                fault.promoted_s = time.monotonic() - fault.at
                return
            time.sleep(0.05)

    def kill_master(self, master: int, lag_s: float = 0.0) -> Fault:
        """SIGKILL ``master``; with ``lag_s``, its replica is frozen that long beforehand (and
        :meth:`_fill` sent) and thawed right after the kill, so that it is promoted while
        behind."""
        replica = replica_of(self.cluster, master)
        if lag_s:
            self.freeze(replica)
            self._fill(master)
            time.sleep(lag_s)
        fault = Fault(time.monotonic())
        self.cluster.kill(master)
        if lag_s:
            self.thaw(replica)
        self._promoted(fault, replica)
        return fault

    def _fill(self, master: int) -> None:
        """Write ``fill_mb`` MB of the suite's own to ``master``: they fill the socket buffers
        between it and its frozen replica (several MB on loopback), so that what the service
        writes next is held by the master alone, as on a slow link; without them a freeze of
        seconds may cost the replica nothing."""
        key, chunk = key_on(self.cluster, master), b"x" * (1 << 20)
        with node_client(master) as client:
            for index in range(self.fill_mb):
                client.hset(key, str(index), chunk)

    def stop_master(self, master: int, stop_s: float) -> Fault:
        """SIGSTOP ``master`` for ``stop_s`` (beyond the node timeout), or until its replica
        has been promoted if that takes longer, then SIGCONT: it comes back as a replica."""
        replica = replica_of(self.cluster, master)
        fault = Fault(time.monotonic())
        self.freeze(master)
        try:
            self._promoted(fault, replica)
            time.sleep(max(0.0, fault.at + stop_s - time.monotonic()))
        finally:
            self.thaw(master)
        return fault


class StepWatch:
    """A thread reading the model's ``t`` every ``every_s``: when learning stalled, and for
    how long, through a failover. Each read is (time, t), t None when the read failed."""

    def __init__(self, cluster: LocalCluster, every_s: float = 0.1, model: str = MODEL) -> None:
        self.cluster = cluster
        self.every_s = every_s
        self.meta = ModelKeys(model).meta
        self.reads: list[tuple[float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StepWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        client: redis.RedisCluster | None = None
        while not self._stop.wait(self.every_s):
            try:
                client = client or cluster_client(self.cluster)
                value = client.hget(self.meta, "t")
                self.reads.append((time.monotonic(), int(value or 0)))
            except (redis.RedisError, IndexError, KeyError):
                # A stale slot map after a failover: start from a fresh client.
                self.reads.append((time.monotonic(), None))
                if client is not None:
                    client.close()
                client = None
        if client is not None:
            client.close()

    def advances(self) -> list[float]:
        """When ``t`` was seen to change (a log side that went back changes it too)."""
        known = [(at, t) for at, t in self.reads if t is not None]
        return [at for (_, before), (at, t) in itertools.pairwise(known) if t != before]


def longest_gap(times: list[float], since: float, until: float) -> float:
    """The longest interval without an event in ``[since, until]``, counted from the last
    event before ``since``: how long the fault at ``since`` stalled what ``times`` record
    (infinite if nothing happened after it)."""
    before = [at for at in times if at <= since]
    after = [at for at in times if since < at <= until]
    if not after:
        return float("inf")
    points = [before[-1] if before else since, *after]
    return max(later - earlier for earlier, later in itertools.pairwise(points))


#: The counters of the rollbacks a learner reports: of the log side, of state shards.
ROLLBACK_COUNTERS = ("online_ctr_log_rollbacks_total", "online_ctr_shard_rollbacks_total")


def rollbacks_counted(stack: Stack) -> int:
    """The rollbacks counted (:data:`ROLLBACK_COUNTERS`), summed over the running workers."""
    total = 0.0
    for url in stack.worker_metrics.values():
        with contextlib.suppress(httpx.HTTPError):
            for line in httpx.get(url, timeout=2.0).text.splitlines():
                if line.startswith(ROLLBACK_COUNTERS):
                    total += float(line.rsplit(" ", 1)[1])
    return int(total)


def rollback_reported(api_url: str) -> str | None:
    """What ``GET /readyz`` says of a rollback of the log side or of state shards (None:
    nothing)."""
    with contextlib.suppress(httpx.HTTPError, ValueError):
        ready = httpx.get(f"{api_url}/readyz", timeout=2.0).json()
        reported: str | None = ready["log_rollback"] or ready.get("shard_rollback")
        return reported
    return None


@contextlib.contextmanager
def service_on(cluster: LocalCluster, work_dir: Path, **settings: str) -> Iterator[Stack]:
    """A :class:`Stack` whose API and workers use ``cluster`` (its own Redis never started);
    every child stopped on exit."""
    stack = Stack(work_dir, OCTR_REDIS_URL=cluster.url, OCTR_REDIS_CLUSTER="true", **settings)
    try:
        yield stack
    finally:
        stack.stop(*stack.children)


def read_lease(cluster: LocalCluster, model: str = MODEL) -> bytes | None:
    with cluster_client(cluster) as client:
        value: bytes | None = client.get(ModelKeys(model).lease)
    return value
