"""A real Redis Cluster on loopback for the tests: six ``redis-server --cluster-enabled yes``
children (three masters, one replica each) joined by ``redis-cli --cluster create``; with
``tls``, every node speaks only TLS, to clients, to its replicas and on the cluster bus.

Ports are picked below the kernel's ephemeral range, so that neither a node's port nor its
cluster bus port (port + 10000) can be taken by a client socket or another test's
``free_port()`` while the cluster runs.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from online_ctr.cli.embedded import find_redis_server
from testkit.ports import ephemeral_start, is_free
from testkit.tls import Certificates

#: Redis puts a node's cluster bus on its port plus this.
BUS_OFFSET = 10_000
#: Every slot of a cluster.
SLOTS = 16_384


def find_redis_cli() -> str:
    """Path of redis-cli, or a ``RuntimeError`` that says how to get it."""
    found = shutil.which("redis-cli")
    if found:
        return found
    raise RuntimeError(
        "no redis-cli on PATH: the Redis Cluster tests create the cluster with "
        "`redis-cli --cluster create`; install it (e.g. `apt-get install redis-tools`)"
    )


def cluster_ports(count: int, low: int = 10_000) -> list[int]:
    """``count`` ports whose own and bus ports were free a moment ago, outside the ephemeral
    range."""
    high = ephemeral_start() - BUS_OFFSET
    candidates = random.sample(range(low, high), k=min(4 * count + 64, high - low))
    chosen: list[int] = []
    taken: set[int] = set()  # the chosen ports and their bus ports
    for port in candidates:
        pair = {port, port + BUS_OFFSET}
        # Not one node's port on another's bus port: free now, but the first node to start
        # binds it (a CI run once drew 11327 and 21327, and the second node never started).
        if taken.isdisjoint(pair) and is_free(port) and is_free(port + BUS_OFFSET):
            chosen.append(port)
            taken |= pair
            if len(chosen) == count:
                return chosen
    raise RuntimeError(f"no {count} free port pairs in {low}..{high} (+{BUS_OFFSET})")


@dataclass
class LocalCluster:
    """A Redis Cluster of ``masters`` x (1 + ``replicas``) nodes with files under ``base_dir``.

    No persistence; ``node_timeout_ms`` is short so that a killed master fails over in a
    couple of seconds. With ``tls``, the nodes speak only TLS with its server certificate,
    and the URL is ``rediss://``.
    """

    base_dir: Path
    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1000
    ports: list[int] = field(default_factory=list)
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    tls: Certificates | None = None

    @property
    def url(self) -> str:
        """The startup URL: the first node (a client discovers the others from it)."""
        scheme = "redis" if self.tls is None else "rediss"
        return f"{scheme}://127.0.0.1:{self.ports[0]}"

    def node_client(self, port: int, timeout_s: float = 0.5, decode: bool = False) -> redis.Redis:
        """A client of the node on ``port`` alone."""
        return redis.Redis(
            host="127.0.0.1",
            port=port,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            decode_responses=decode,
            **({} if self.tls is None else self.tls.client_options()),
        )

    def cluster_info(self, port: int) -> dict[str, str]:
        """``CLUSTER INFO`` of the node on ``port``, as strings."""
        with self.node_client(port, decode=True) as client:
            info: dict[str, str] = client.execute_command("CLUSTER INFO")
        return info

    def pid(self, port: int) -> int:
        return self.processes[port].pid

    def command(self, port: int) -> list[str]:
        """The redis-server command line of the node on ``port``."""
        return [
            find_redis_server(),
            "--bind", "127.0.0.1",
            *self._listen(port),
            "--dir", str(self.base_dir / str(port)),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            # A replica may always take over, however stale: a test cluster has no history.
            "--cluster-replica-validity-factor", "0",
            "--repl-diskless-sync-delay", "0",
            "--save", "",
            "--appendonly", "no",
            "--logfile", "redis.log",
            "--daemonize", "no",
        ]  # fmt: skip

    def _listen(self, port: int) -> list[str]:
        if self.tls is None:
            return ["--port", str(port)]
        return [
            "--port", "0",
            "--tls-port", str(port),
            "--tls-cluster", "yes",
            "--tls-replication", "yes",
            "--tls-cert-file", str(self.tls.server.cert),
            "--tls-key-file", str(self.tls.server.key),
            "--tls-ca-cert-file", str(self.tls.ca),
            "--tls-auth-clients", "no",
        ]  # fmt: skip

    def _cli_tls(self) -> list[str]:
        if self.tls is None:
            return []
        return ["--tls", "--cacert", str(self.tls.ca)]

    def start(self, timeout_s: float = 30.0) -> LocalCluster:
        """Start the nodes, create the cluster, and wait until it serves every slot."""
        cli = find_redis_cli()
        self.ports = cluster_ports(self.masters * (1 + self.replicas))
        try:
            for port in self.ports:
                self.start_node(port)
            self._create(cli, timeout_s)
            self.wait_ok(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def start_node(self, port: int, timeout_s: float = 10.0) -> None:
        """Start (or restart, keeping its ``nodes.conf``) the node on ``port``."""
        (self.base_dir / str(port)).mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            self.command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.processes[port] = process
        deadline = time.monotonic() + timeout_s
        with self.node_client(port) as client:
            while True:
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                    if client.ping():
                        return
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on {port} did not start: {self.log(port)}")
                time.sleep(0.02)

    def _create(self, cli: str, timeout_s: float) -> None:
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        replicas = ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
        done = subprocess.run(
            [cli, *self._cli_tls(), "--cluster", "create", *nodes, *replicas],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Wait until every running node sees the cluster ok with all slots served, and every
        replica is in sync with its master."""
        deadline = time.monotonic() + timeout_s
        while not self._all_ok():
            if time.monotonic() > deadline:
                states = {port: self._state(port) for port in self.running()}
                raise RuntimeError(f"cluster not ok after {timeout_s} s: {states}")
            time.sleep(0.05)

    def _state(self, port: int) -> str:
        try:
            info = self.cluster_info(port)
        except redis.RedisError as error:
            return repr(error)
        return f"{info.get('cluster_state')} slots_ok={info.get('cluster_slots_ok')}"

    def _all_ok(self) -> bool:
        try:
            replication = {port: self._replication(port) for port in self.running()}
            masters = {port for port, info in replication.items() if info["role"] == "master"}
            return len(masters) == self.masters and all(
                self._node_ok(port, masters, info) for port, info in replication.items()
            )
        except redis.RedisError:
            return False

    def _node_ok(self, port: int, masters: set[int], replication: dict[str, object]) -> bool:
        """Whether the node sees the whole cluster ok, with the same masters as their roles
        say, and, for a replica, is in sync."""
        info = self.cluster_info(port)
        return (
            info.get("cluster_state") == "ok"
            and info.get("cluster_slots_ok") == str(SLOTS)
            and info.get("cluster_known_nodes") == str(len(self.ports))
            and self._masters_seen_by(port) == masters
            and replication.get("master_link_status", "up") == "up"
        )

    def _masters_seen_by(self, port: int) -> set[int]:
        with self.node_client(port, decode=True) as client:
            nodes: dict[str, dict[str, Any]] = client.execute_command("CLUSTER NODES")
        return {
            int(address.rsplit(":", 1)[1])
            for address, node in nodes.items()
            if "master" in node["flags"] and "fail" not in node["flags"] and node["slots"]
        }

    def _replication(self, port: int) -> dict[str, object]:
        with self.node_client(port, decode=True) as client:
            info: dict[str, object] = client.info("replication")
        return info

    def running(self) -> list[int]:
        """Ports of the nodes whose process is alive."""
        return [port for port, process in self.processes.items() if process.poll() is None]

    def master_ports(self) -> list[int]:
        """Ports of the live nodes whose role is master now."""
        masters = []
        for port in self.running():
            with contextlib.suppress(redis.RedisError):
                if self._replication(port)["role"] == "master":
                    masters.append(port)
        return masters

    def heal(self, timeout_s: float = 30.0) -> None:
        """Restart the nodes that are down (a killed master comes back as a replica) and
        wait until the cluster is whole again."""
        for port in self.ports:
            if port not in self.running():
                self.start_node(port)
        self.wait_ok(timeout_s)

    def flushall(self) -> None:
        """Empty every master (replicas follow)."""
        for port in self.master_ports():
            with self.node_client(port, timeout_s=2.0) as client:
                client.flushall()

    def kill(self, port: int, signum: int = signal.SIGKILL) -> None:
        """Send ``signum`` to the node on ``port`` and, for SIGKILL, reap it."""
        process = self.processes[port]
        os.kill(process.pid, signum)
        if signum == signal.SIGKILL:
            process.wait()

    def log(self, port: int) -> str:
        path = self.base_dir / str(port) / "redis.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else "(no log)"

    def stop(self) -> None:
        """Stop every node (SIGKILL: nothing to save) and remove their files."""
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
            process.wait()
        self.processes.clear()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
