"""The embedded Redis's memory limit: ``OCTR_REDIS_MAXMEMORY``, or by default a share of the
memory this machine gives the service (its RAM, or its container's cgroup limit if lower).

At the limit Redis refuses writes (``maxmemory-policy noeviction``: evicting would drop a
model's state or accepted feedback), and the service degrades as docs/limits.md says: /learn
answers 503, /predict still answers, learning waits and resumes by itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from online_ctr.config.settings import Settings

#: The share of the machine's memory the embedded Redis may hold when OCTR_REDIS_MAXMEMORY is
#: unset. Redis with an append-only file forks to rewrite it, and the child's pages are copied
#: as the learner writes the parent's: while a rewrite runs, Redis can take up to twice what it
#: holds (a learner touches state all over the key space), and jemalloc's fragmentation adds
#: about a tenth. At 40%, that worst case is 88% of the memory (2.2 x 0.4), leaving the rest
#: to the API and the worker (each some hundreds of MB: their caches and name tables have
#: bounds of their own) and to the OS; half, the share often quoted for a forking Redis alone,
#: would leave them nothing in that worst case.
DEFAULT_SHARE = 0.4
#: Where the kernel shows cgroups, and which cgroups this process is in.
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_MEMBERSHIP = Path("/proc/self/cgroup")
#: The memory limit's file of a cgroup: version 2, and version 1's memory controller.
_LIMIT_FILES = (("", "memory.max"), ("unified", "memory.max"), ("memory", "memory.limit_in_bytes"))


def physical_memory() -> int:
    """Bytes of RAM of this machine (MemTotal)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cgroup_limit(root: Path = CGROUP_ROOT, membership: str | None = None) -> int | None:
    """The lowest memory limit of this process's cgroups and their ancestors (version 1 or
    2), or None if there is none; ``membership`` is what /proc/self/cgroup says."""
    if membership is None:
        try:
            membership = CGROUP_MEMBERSHIP.read_text()
        except OSError:
            return None
    paths = {
        line.split(":", 2)[2].strip("/") for line in membership.splitlines() if line.count(":") >= 2
    }
    limits = [
        limit
        for below, name in _LIMIT_FILES
        for path in paths | {""}
        for directory in _up_to(root / below, path)
        if (limit := _read_limit(directory / name)) is not None
    ]
    return min(limits, default=None)


def _up_to(base: Path, path: str) -> list[Path]:
    """``base/path`` and each of its parents down to ``base``: a limit set on an ancestor
    holds for the cgroups below it."""
    parts = [part for part in path.split("/") if part]
    return [base.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _read_limit(path: Path) -> int | None:
    """A cgroup's memory limit in bytes; None if unset ("max"), absent or unreadable."""
    try:
        value = path.read_text().strip()
    except OSError:
        return None
    return int(value) if value.isdigit() else None


def machine_memory() -> int:
    """The memory the service may use: the RAM, or a lower cgroup limit (a container's)."""
    physical = physical_memory()
    limit = cgroup_limit()
    # Version 1 writes "no limit" as a huge number, a page short of 2^63.
    return physical if limit is None or limit >= physical else limit


def default_maxmemory(memory: int | None = None) -> int:
    """:data:`DEFAULT_SHARE` of ``memory`` (default: :func:`machine_memory`), in whole MiB.

    >>> default_maxmemory(24 * 1024**3) // 1024**2
    9830
    """
    share = int(DEFAULT_SHARE * (machine_memory() if memory is None else memory))
    return share - share % (1 << 20)


def embedded_maxmemory(settings: Settings) -> int:
    """The embedded Redis's maxmemory in bytes: OCTR_REDIS_MAXMEMORY, or the default share."""
    given = settings.redis_maxmemory_bytes()
    return default_maxmemory() if given is None else given


def memory_limit_text(size: int) -> str:
    """A memory limit for a log line.

    >>> memory_limit_text(0), memory_limit_text(512 * 1024**2), memory_limit_text(10 * 1024**3 + 1)
    ('none', '512 MiB', '10.0 GiB')
    """
    if size == 0:
        return "none"
    if size < 1 << 30:
        return f"{size / (1 << 20):.0f} MiB"
    return f"{size / (1 << 30):.1f} GiB"
