"""Free loopback ports for the processes a test starts.

Ports are picked at random below the kernel's ephemeral range (``ip_local_port_range``), where
the kernel never puts a client socket's local port, and each process hands a port out once.
Asked for ``bind(('127.0.0.1', 0))`` instead, the kernel may hand out the same port twice in a
row, and an odd port there may be held by one of the thousands of client connections the
benchmarks beside a test open (a second worker's metrics port, ``port + 1``, was).
"""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

#: The lowest port handed out: above the registered services people run on a development box.
LOW = 10_000

_handed_out: set[int] = set()


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    with contextlib.suppress(OSError, ValueError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32_768


def is_free(port: int) -> bool:
    """Whether a listener could bind ``port`` on 127.0.0.1 a moment ago."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_ports(count: int, *, consecutive: bool = False) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that nothing listened on a moment ago, none handed
    out before by this process; with ``consecutive``, ``count`` ports in a row (a stack whose
    workers listen on ``port + i``)."""
    high = ephemeral_start()
    chosen: list[int] = []
    for _ in range(10_000):
        start = random.randrange(LOW, high - count if consecutive else high)
        block = range(start, start + count) if consecutive else range(start, start + 1)
        if all(p not in _handed_out and p not in chosen and is_free(p) for p in block):
            chosen.extend(block)
            if len(chosen) >= count:
                _handed_out.update(chosen)
                return chosen
    raise RuntimeError(f"no {count} free ports in {LOW}..{high}")


def free_port() -> int:
    """One port on 127.0.0.1 that nothing listened on a moment ago (see :func:`free_ports`)."""
    return free_ports(1)[0]
