"""Free loopback ports for the processes a test starts."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listened on a moment ago.

    All are held open together before any is let go: asked one at a time, the kernel may hand
    out a port twice (two processes of one stack then race for it, and one exits)."""
    with ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
