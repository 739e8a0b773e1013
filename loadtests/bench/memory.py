"""Section 5, memory: Redis bytes per tracked feature after a real worker learned the Criteo
head file (all 10,000 rows).

State layout (``online_ctr/store/keys.py``, ``online_ctr/store/layout.py``): a feature is one field
of
one of ``OCTR_STATE_BUCKETS`` Redis hashes, named by the id's bits above the bucket bits
(6 bytes at the default 2^18 buckets, 7 at 64), its value the rule's fields as float64 (FTRL:
``z``, ``n``), so 22 (or 23) bytes of payload per feature. What Redis adds is per entry (a
small hash is a listpack: a length byte before and after each field and value) and per key
(the key's name, its dictionary entry and object header, the allocator's size-class rounding),
spread over the features of the bucket. The file's 44k features spread thinly over the default
2^18 buckets (under one each, so the per-key cost dominates); 64 buckets hold about 690 each.
``make bench-scale`` measures the same at 10 million features.

Per configuration: ``used_memory`` once the worker has created the empty model (baseline),
and again after it learned the file (the stream's entries are deleted as they are applied);
the difference over the tracked-feature count. Alongside, ``MEMORY USAGE`` (exact,
``SAMPLES 0``) summed over every bucket key, and that of the expiry set, which holds the
nonzero weights that would decay to zero untouched (none with FTRL, whose weights do not move
untouched). The rest of the difference is the main key table's share and allocator rounding.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import redis

from loadtests.common import feed
from loadtests.common.processes import Stack, scratch_dir
from loadtests.common.report import BenchOptions, Cell, Section, table

BUCKET_COUNTS = (1 << 18, 64)
#: Payload bytes per FTRL feature at 64 buckets: a 7-byte field name and two float64 (z, n).
PAYLOAD_BYTES = 7 + 2 * 8


@dataclass(frozen=True)
class MemoryResult:
    """What one bucket configuration costs after learning the file."""

    buckets: int
    examples: int
    tracked: int
    used_delta: int
    buckets_bytes: int
    expiry_bytes: int
    encodings: dict[str, int]

    @property
    def bytes_per_feature(self) -> float:
        return self.used_delta / self.tracked

    @property
    def bucket_bytes_per_feature(self) -> float:
        return self.buckets_bytes / self.tracked


def bucket_usage(client: redis.Redis) -> tuple[int, dict[str, int]]:
    """Exact bytes of every existing bucket key, and how many are in each encoding."""
    keys = list(client.scan_iter(match="octr:{default/*}:b:*", count=10_000))
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.memory_usage(key, samples=0)
            pipe.object("encoding", key)
        answers = pipe.execute()
    sizes, encodings = answers[0::2], answers[1::2]
    found = Counter(e.decode() if isinstance(e, bytes) else str(e) for e in encodings if e)
    return sum(size for size in sizes if size), dict(found)


def measure_one(work_dir: Path, rows: list[feed.Row], buckets: int) -> MemoryResult:
    """A fresh Redis and worker with ``buckets`` state buckets; learn the rows; measure."""
    with Stack(work_dir, OCTR_STATE_BUCKETS=str(buckets)) as stack:
        client = stack.client()
        stack.start_workers(1)
        feed.wait_for_worker(client, stack.check_alive)
        baseline = int(client.info("memory")["used_memory"])
        feed.feed(client, feed.entries(rows), len(rows))
        feed.wait_for_step(client, len(rows), 600, stack.check_alive)
        stack.stop(*stack.workers())
        used = int(client.info("memory")["used_memory"])
        tracked = int(client.hget(feed.MODEL.meta, "tracked") or 0)
        buckets_bytes, encodings = bucket_usage(client)
        expiry_bytes = int(client.memory_usage(feed.MODEL.expiry, samples=0) or 0)
        client.close()
    return MemoryResult(
        buckets, len(rows), tracked, used - baseline, buckets_bytes, expiry_bytes, encodings
    )


def measure(data_dir: Path) -> list[MemoryResult]:
    rows = feed.criteo_rows(data_dir)
    results = []
    for buckets in BUCKET_COUNTS:
        with scratch_dir(f"memory-{buckets}") as folder:
            results.append(measure_one(Path(folder), rows, buckets))
    return results


def render(results: list[MemoryResult]) -> str:
    """The section's Markdown: the layout, then one row per bucket configuration."""
    header = ["state buckets", "bucket encodings", "features tracked", "used_memory delta"]
    header += ["bytes/feature", "bucket keys bytes/feature", "expiry set bytes"]
    header += ["payload bytes/feature"]
    rows: list[list[Cell]] = [
        [
            r.buckets,
            ", ".join(f"{name} {n:,}" for name, n in sorted(r.encodings.items())),
            r.tracked,
            r.used_delta,
            r.bytes_per_feature,
            r.bucket_bytes_per_feature,
            r.expiry_bytes,
            PAYLOAD_BYTES,
        ]
        for r in results
    ]
    intro = __doc__.split("\n\n", 1)[1] if __doc__ else ""
    return intro.strip() + "\n\n" + table(header, rows, digits=1)


def run(options: BenchOptions) -> Section:
    """Section 5 for ``loadtests.bench``."""
    return Section(title="Memory", markdown=render(measure(options.data_dir)))
