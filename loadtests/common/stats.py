"""The benchmarks' arithmetic: percentiles, CPU time from ``/proc``, Redis command counts.

>>> percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50), percentile([5.0, 1.0, 3.0, 2.0, 4.0], 99)
(3.0, 5.0)
>>> parse_proc_stat("42 (a b) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0").ticks
200
>>> calls_delta({"hset": 5, "info": 2}, {"hset": 12, "info": 3, "xadd": 4}, minus={"info": 1})
{'hset': 7, 'xadd': 4}
>>> before = command_usec({"cmdstat_hset": {"calls": 2, "usec": 3}})
>>> per_call_us(before, command_usec({"cmdstat_hset": {"calls": 6, "usec": 11}}), "hset")
2.0
"""

from __future__ import annotations

import math
import os
import resource
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: Clock ticks per second of the utime/stime fields in ``/proc/<pid>/stat``.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile: always one of the values, never an interpolation.

    With few samples the p99 is the largest one, which is the honest answer.
    """
    if not values:
        raise ValueError("no values")
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100], got {q}")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@dataclass(frozen=True)
class ProcStat:
    """The CPU time of a process (all its threads) in clock ticks, user plus system."""

    ticks: int

    @property
    def seconds(self) -> float:
        return self.ticks / CLOCK_TICKS


def parse_proc_stat(text: str) -> ProcStat:
    """Read utime and stime (fields 14 and 15) of a ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may hold spaces: split after it.
    """
    after_name = text[text.rindex(")") + 2 :].split()
    # after_name[0] is field 3 (state), so field k is after_name[k - 3].
    return ProcStat(int(after_name[11]) + int(after_name[12]))


def cpu_seconds(pid: int) -> float:
    """CPU seconds a running process has used so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stream:
        return parse_proc_stat(stream.read()).seconds


def parse_vm_rss(status: str) -> int:
    """Resident bytes, from the text of ``/proc/<pid>/status`` (its ``VmRSS`` line, in kB).

    >>> parse_vm_rss("Name:\\tpython\\nVmRSS:\\t   20480 kB\\nVmSwap:\\t 0 kB\\n")
    20971520
    """
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no VmRSS line (a kernel thread, or a process that has exited)")


def rss_bytes(pid: int) -> int:
    """Resident bytes of a running process."""
    with open(f"/proc/{pid}/status", encoding="ascii") as stream:
        return parse_vm_rss(stream.read())


def children_cpu_seconds() -> float:
    """CPU seconds of every child this process has waited for (wrk, replay and VW runs...)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """Cores used by some running processes, and by the children reaped, over a time window."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._wall = time.perf_counter()
        self._cpu = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._children = children_cpu_seconds()

    def cores(self) -> dict[str, float]:
        """Average cores per process since the meter started; ``reaped`` for waited children."""
        wall = time.perf_counter() - self._wall
        used = {name: cpu_seconds(pid) - self._cpu[name] for name, pid in self.pids.items()}
        used["reaped"] = children_cpu_seconds() - self._children
        return {name: seconds / wall for name, seconds in used.items()}


def command_calls(commandstats: Mapping[str, Mapping[str, float]]) -> dict[str, int]:
    """Calls per command from redis-py's parsed ``INFO commandstats`` (``cmdstat_hset`` ...).

    Commands a Lua script runs are counted here as well as the ``evalsha`` that ran them.
    """
    prefix = "cmdstat_"
    return {
        name[len(prefix) :]: int(stats["calls"])
        for name, stats in commandstats.items()
        if name.startswith(prefix)
    }


def calls_delta(
    before: Mapping[str, int], after: Mapping[str, int], minus: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Calls per command between two snapshots, less the ``minus`` calls (the measuring
    client's own), without zeros; ``ValueError`` if ``minus`` takes more than there were."""
    minus = minus or {}
    delta = {name: after.get(name, 0) - before.get(name, 0) for name in {*after, *minus}}
    counted = {name: n - minus.get(name, 0) for name, n in delta.items()}
    negative = sorted(name for name, n in counted.items() if n < 0)
    if negative:
        raise ValueError(f"fewer calls of {', '.join(negative)} than subtracted")
    return {name: n for name, n in sorted(counted.items()) if n > 0}


#: Per command, its calls and microseconds so far (``INFO commandstats``).
CommandUsec = dict[str, tuple[int, int]]


def command_usec(commandstats: Mapping[str, Mapping[str, int]]) -> CommandUsec:
    """Calls and microseconds per command, from the reply of ``INFO commandstats``."""
    return {
        name.removeprefix("cmdstat_"): (v["calls"], v["usec"]) for name, v in commandstats.items()
    }


def calls(before: CommandUsec, after: CommandUsec, name: str) -> int:
    """Calls of command ``name`` between two :func:`command_usec` reads."""
    return after.get(name, (0, 0))[0] - before.get(name, (0, 0))[0]


def per_call_us(before: CommandUsec, after: CommandUsec, name: str) -> float:
    """Microseconds per call of command ``name`` between two reads; NaN if none was made."""
    made = calls(before, after, name)
    usec = after.get(name, (0, 0))[1] - before.get(name, (0, 0))[1]
    return usec / made if made else math.nan
