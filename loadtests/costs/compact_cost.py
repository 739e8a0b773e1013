"""What the compact state encoding saves and what it costs:
``python -m loadtests.costs.compact_cost``.

1. Redis bytes per tracked feature: on a fresh redis-server, an FTRL model's state shards (2^18
   buckets, 64 shards) are filled directly (``StateShards.apply`` of records built by the
   layout, no worker) with 10M random feature ids, in one model per configuration: float64 and
   compact, at 64-bit ids and with ``hash_bits`` 42 (3-byte fields). Printed: ``INFO memory``
   ``used_memory`` growth from the empty model, over the features tracked (distinct ids after
   the hashing trick), and how many of the drawn ids shared their slot with another.
2. Log-loss cost: every click log in ``../shared/data`` replayed in-process (progressive
   validation, default hyper-parameters) with float64 and with compact state, for each rule
   with a compact form; printed: both log losses, their absolute and relative difference, and
   the features whose weight-bearing value ended clipped at the edge of q2.13.

Prints Markdown tables; no targets asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import redis.asyncio as aioredis

from online_ctr.cli.embedded import RedisServer
from online_ctr.learning.compact import RULES, WEIGHT_MAX, WEIGHT_MIN, CompactCodec
from online_ctr.learning.detect import FormatError, detect_format
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule
from online_ctr.store.state import ModelStore, spec_from
from testkit.paths import DATA_DIR

#: (encoding, hash bits) of each filled model.
CONFIGURATIONS = (("float64", 64), ("compact", 64), ("compact", 42))
CHUNK = 500_000


def drawn_ids(rng: np.random.Generator, count: int, hash_bits: int) -> Iterator[np.ndarray]:
    """``count`` random 64-bit ids reduced to ``hash_bits`` bits as the hasher does, in chunks."""
    for first in range(0, count, CHUNK):
        ids = rng.integers(0, 2**64 - 1, min(CHUNK, count - first), np.uint64, endpoint=True)
        yield ids & np.uint64((1 << hash_bits) - 1) if hash_bits < 64 else ids


async def bytes_per_feature(url: str, encoding: str, hash_bits: int, count: int) -> list[str]:
    """One table row: the configuration, features tracked, collisions, bytes per feature."""
    client = aioredis.Redis.from_url(url)
    await client.flushall()
    params = get_rule("ftrl").params()
    spec = spec_from("default", "ftrl", params, hash_bits, 1 << 18, 64, encoding)
    store = ModelStore(client, spec)
    await store.ensure()
    before = int((await client.info("memory"))["used_memory"])
    rng, drawn = np.random.default_rng(1), []
    for seq, ids in enumerate(drawn_ids(rng, count, hash_bits), start=1):
        state = np.column_stack([rng.normal(size=len(ids)), rng.exponential(size=len(ids))])
        await store.shards.apply(seq, spec.layout.records(ids, state))
        drawn.append(ids)
    after = int((await client.info("memory"))["used_memory"])
    await client.aclose()
    tracked = len(np.unique(np.concatenate(drawn)))
    layout = spec.layout
    return [
        encoding,
        str(hash_bits),
        f"{layout.field_bytes} + {layout.value_bytes}",
        f"{tracked:,}",
        f"{count - tracked:,}",
        f"{(after - before) / tracked:.2f}",
    ]


def data_files() -> Iterator[tuple[Path, str | None]]:
    """Every file under the data folder with the format replay reads it in (None: refused)."""
    for path in sorted(DATA_DIR.rglob("*")):
        if path.is_file() and path.name != "README.md":
            try:
                yield path, detect_format(path)
            except FormatError:
                yield path, None


def log_losses(path: Path, data_format: str, rule_name: str, limit: int | None) -> list[str]:
    """One table row: float64 and compact progressive log loss and their difference."""
    rule = get_rule(rule_name)
    losses, clipped = [], 0
    for encoding in ("float64", "compact"):
        model = InMemoryModel(rule, rule.params(), encoding=encoding)
        result = replay(read_examples(path, data_format, limit), model, FeatureHasher(), 4096)
        losses.append(float(result.logloss or 0.0))
        if encoding == "compact":
            state = model.table.data[: len(model.table), :-1]
            weights, _ = CompactCodec.of(rule_name, model.params).codes(state)
            clipped = int(np.count_nonzero((weights == WEIGHT_MIN) | (weights == WEIGHT_MAX)))
    exact, compact = losses
    return [
        path.name,
        rule_name,
        f"{result.examples:,}",
        f"{exact:.6f}",
        f"{compact:.6f}",
        f"{compact - exact:+.2e}",
        f"{(compact - exact) / exact:+.2e}",
        f"{clipped} of {result.features_tracked:,}",
    ]


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def memory_table(url: str, count: int) -> str:
    rows = [asyncio.run(bytes_per_feature(url, e, bits, count)) for e, bits in CONFIGURATIONS]
    header = ["encoding", "hash bits", "field + value bytes", "features tracked"]
    return markdown([*header, "ids sharing a slot", "Redis bytes/feature"], rows)


def loss_table(limit: int | None) -> str:
    rows, refused = [], []
    for path, data_format in data_files():
        if data_format is None:
            refused.append(path.name)
            continue
        rows += [log_losses(path, data_format, rule, limit) for rule in RULES]
    header = ["file", "rule", "examples", "float64 log loss", "compact log loss"]
    table = markdown([*header, "difference", "relative", "clipped weights"], rows)
    return table + f"\n\nNot click logs (refused by replay): {', '.join(refused) or 'none'}."


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.costs.compact_cost", description=__doc__
    )
    parser.add_argument("--quick", action="store_true", help="20k features, 500 rows a file")
    quick = parser.parse_args().quick
    with tempfile.TemporaryDirectory() as folder, RedisServer(Path(folder), persist=False) as r:
        print(memory_table(r.url, 20_000 if quick else 10_000_000), flush=True)
    print()
    print(loss_table(500 if quick else None))


if __name__ == "__main__":
    main()
