"""Shared fixtures: real Redis servers started by the tests themselves, and the data folder."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from online_ctr.cli.embedded import RedisServer
from testkit.local_cluster import LocalCluster
from testkit.paths import DATA_DIR, ROOT
from testkit.ports import free_port
from testkit.tls import Certificates, Pair, TlsRedisServer, make_certificates

#: What a test needs, read off the fixtures it uses, so a marker can never go stale: `-m "not
#: processes and not cluster and not docker"` is the quick subset (docs/development.md).
#: Tests that start processes without such a fixture carry `pytest.mark.processes` themselves
#: (a one-shot tool such as promtool or `python -c` does not count: it exits at once).
NEEDS = {
    "redis": {"redis_server", "make_redis_server", "make_tls_redis"},
    "cluster": {"redis_cluster", "redis_tls_cluster"},
    "processes": {"start_service", "start_serve", "start_api"},
}


#: The files that run longest (make test's slowest durations: a minute or more each, or many
#: long tests), handed to the test processes first: ``--dist loadfile`` hands out files in
#: collection order, and one of these started last ran alone while the other processes idled
#: (tests/workers/ is collected last).
LONGEST_FIRST = (
    "tests/workers/test_worker_matches_replay.py",
    "tests/deploy/test_compose_stack.py",
    "tests/loadtests/test_bench_scale.py",
    "tests/integration/test_fuzz_api.py",
    "tests/docs/test_doc_commands.py",
    "tests/integration/test_abuse.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in NEEDS.items():
            if used & fixtures:
                item.add_marker(marker)
    rank = {path: place for place, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


def fresh_python(code: str) -> str:
    """What ``code`` prints when a fresh interpreter runs it from the project's root: for what
    an import loads or leaves alone, which this session's own imports would hide."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis for the session, on a free loopback port; never the machine's own."""
    with RedisServer(tmp_path_factory.mktemp("redis"), port=free_port(), persist=False) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session Redis, emptied for this test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
def make_redis_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start dedicated Redis servers (for tests that stop and restart one); all stopped after."""
    servers: list[RedisServer] = []

    def make(persist: bool = True) -> RedisServer:
        server = RedisServer(
            tmp_path / f"redis-{len(servers)}", port=free_port(), persist=persist
        ).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def tls_certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """The CAs and certificates of :mod:`testkit.tls`, made for this session."""
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def make_tls_redis(
    tmp_path: Path, tls_certificates: Certificates
) -> Iterator[Callable[..., TlsRedisServer]]:
    """Start Redis servers that speak only TLS (``mutual``: requiring a client certificate;
    ``server``: another certificate than the CA's server one); all stopped after."""
    servers: list[TlsRedisServer] = []

    def make(
        mutual: bool = False, server: Pair | None = None, persist: bool = False
    ) -> TlsRedisServer:
        directory = tmp_path / f"tls-redis-{len(servers)}"
        started = TlsRedisServer(
            directory,
            tls_certificates,
            port=free_port(),
            mutual=mutual,
            server=server,
            persist=persist,
        )
        servers.append(started)
        return started.start()

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real Redis Cluster for the session (3 masters, 3 replicas) on free loopback ports."""
    with LocalCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_tls_cluster(
    tmp_path_factory: pytest.TempPathFactory, tls_certificates: Certificates
) -> Iterator[LocalCluster]:
    """A real Redis Cluster whose nodes speak only TLS, to clients, to their replicas and on
    the cluster bus (the CA's server certificate each)."""
    with LocalCluster(
        tmp_path_factory.mktemp("redis-tls-cluster"), tls=tls_certificates
    ) as cluster:
        yield cluster


@pytest.fixture
def redis_cluster_url(redis_cluster: LocalCluster) -> str:
    """The session cluster, whole again (nodes a test killed restarted) and emptied."""
    redis_cluster.heal()
    redis_cluster.flushall()
    return redis_cluster.url


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared data folder, failing clearly when it is not beside the repository."""
    assert DATA_DIR.is_dir(), f"the shared data should be at {DATA_DIR}"
    return DATA_DIR
