"""The tests' ports: below the kernel's ephemeral range, free, and never handed out twice by a
process; and every test and load test takes its ports from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit import local_cluster, ports

ROOT = Path(__file__).resolve().parents[1]


def test_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    taken = ports.free_ports(200) + [ports.free_port() for _ in range(50)]
    assert len(set(taken)) == len(taken)
    assert all(ports.LOW <= port < ports.ephemeral_start() for port in taken)
    assert all(ports.is_free(port) for port in taken)


def test_consecutive_ports_are_a_run_of_free_ones() -> None:
    first = ports.free_ports(3, consecutive=True)
    assert first == [first[0], first[0] + 1, first[0] + 2]
    assert all(ports.is_free(port) for port in first)


def test_no_test_takes_a_port_from_the_kernel_or_the_product() -> None:
    """``online_ctr.cli.embedded.free_port`` is ``bind(0)``: what the tests must not use."""
    offenders = [
        str(path.relative_to(ROOT))
        for tree in ("tests", "loadtests", "testkit")
        for path in (ROOT / tree).rglob("*.py")
        if re.search(r"from online_ctr\.cli\.embedded import[^\n]*\bfree_port\b", path.read_text())
    ]
    assert offenders == []


def test_a_cluster_never_puts_one_node_on_another_nodes_bus_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Candidates drawn so that the second is the first's bus port (as a CI run once drew,
    and the node on it never started): it is passed over, as is any port whose bus port is
    a chosen node's."""
    first = ports.free_ports(1)[0]
    while not local_cluster.is_free(first + local_cluster.BUS_OFFSET):
        first = ports.free_ports(1)[0]
    drawn = [first, first + local_cluster.BUS_OFFSET]
    rest = list(range(10_000, ports.ephemeral_start() - local_cluster.BUS_OFFSET))
    monkeypatch.setattr(local_cluster.random, "sample", lambda _, k: (drawn + rest)[:k])
    chosen = local_cluster.cluster_ports(6)
    buses = {port + local_cluster.BUS_OFFSET for port in chosen}
    assert chosen[0] == first and len(set(chosen)) == 6
    assert buses.isdisjoint(chosen)
