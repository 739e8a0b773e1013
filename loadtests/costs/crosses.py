"""What field crosses cost and what they change, on each shared click log:
``python -m loadtests.costs.crosses`` prints one markdown table per log.

Each log is read once into memory; then, for no crosses, each cross alone and all of them
together, the default FTRL learns it in order at batch size 1's results (the exact learner;
the rows are handed over 16,384 at a time, as ``online-ctr replay`` does), each example
predicted before it is learned. A row reports the progressive log loss (and its change against
no crosses), the features tracked at the end (the state; each cross adds its distinct values),
and the examples per second of hashing and learning (the best of ``--repeats`` runs: the
machine is shared, and the best run is the one least disturbed; parsing is not timed, so the
crossing's cost is not diluted by it); and the API's part, the time to hash a /learn body of
the first 1,000 rows from its bytes on the compiled scan path, its names table warm (the best
of 10 x ``--repeats``).

iPinYou is shared in libFM form, its features one-hot indexes with no field names; its
dictionary (``featindex.fm.txt``, ``field:value<TAB>index``) names each index, so its rows are
read here as ``{field: value}`` (the same one-hot features, under other names: with no crosses
the log loss is the same as the indexes', tested) and then crossed like the others.

The crosses are picked before measuring, as a practitioner would: the advertiser, creative or
ad id against the publisher, slot or time (McMahan et al. 2013's examples), and, for Criteo's
anonymous fields, pairs of its low-cardinality categorical fields.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from online_ctr.learning.crosses import Crosses, crosses_text, parse_crosses
from online_ctr.learning.features import Example, FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import ReplayResult, replay
from online_ctr.learning.rules import get_rule
from service.api.scan import NameIds, scan
from testkit.paths import DATA_DIR

BATCH = 16_384
Row = tuple[Example, int]

#: Per log: its file, its format and the crosses tried (each alone, then all together).
LOGS: dict[str, tuple[str, str, str]] = {
    "criteo": ("criteo/criteo_kaggle_train_head10k.tsv", "criteo", "C6&C9,C14&C17,C20&C23"),
    "avazu": (
        "avazu/avazu_train_head10k.csv",
        "avazu",
        "C14&site_id,C14&app_id,site_id&banner_pos",
    ),
    "ipinyou": (
        "ipinyou/ipinyou_train.fm.txt",
        "ipinyou",
        "advertiser&domain,creative&slotid,advertiser&hour",
    ),
}
#: The API's part: a /learn body of this many rows, hashed from its bytes (the scan path).
BODY_ROWS = 1_000


def ipinyou_rows(path: Path, limit: int | None = None) -> Iterator[Row]:
    """The libFM rows with each index named by the dictionary beside the file: field=value."""
    names: dict[str, tuple[str, str]] = {}
    with open(path.parent / "featindex.fm.txt", encoding="utf-8") as dictionary:
        for line in dictionary:
            name, index = line.rstrip("\n").rsplit("\t", 1)
            field, _, value = name.partition(":")
            names[index] = (field, value)
    for x, y in read_examples(path, "libfm", limit):
        yield dict(names[index] for index in x), y


def rows_of(log: str, limit: int | None = None) -> list[Row]:
    file, fmt, _ = LOGS[log]
    path = DATA_DIR / file
    if fmt == "ipinyou":
        return list(ipinyou_rows(path, limit))
    return list(read_examples(path, fmt, limit))


def run(rows: list[Row], crosses: Crosses) -> ReplayResult:
    """The default FTRL over ``rows``, hashed with ``crosses``."""
    hasher = FeatureHasher(numeric="log_bucket", crosses=crosses)
    return replay(rows, InMemoryModel(get_rule("ftrl")), hasher, batch_size=BATCH)


def api_seconds(rows: list[Row], crosses: Crosses, repeats: int) -> float:
    """The best time of the API's hashing of one /learn body of the first rows from its
    bytes (:mod:`service.api.scan`), its names table warm, as for traffic seen before."""
    examples = [{"features": x, "label": y} for x, y in rows[:BODY_ROWS]]
    body = json.dumps({"examples": examples}).encode()
    scanned = scan(body, want_label=True)
    assert scanned is not None
    names = NameIds(FeatureHasher(numeric="log_bucket", crosses=crosses))
    names.batch(body, scanned)  # the table learns the names; numba's code is loaded
    best = math.inf
    for _ in range(10 * repeats):
        start = time.perf_counter()
        names.batch(body, scanned)
        best = min(best, time.perf_counter() - start)
    return best


def measure(rows: list[Row], crosses: Crosses, repeats: int) -> dict[str, Any]:
    results = [run(rows, crosses) for _ in range(repeats)]
    first = results[0]
    assert all(r.logloss == first.logloss for r in results)  # the same learning every time
    return {
        "crosses": crosses_text(crosses) or "none",
        "logloss": first.logloss,
        "auc": first.auc,
        "features": first.features_tracked,
        "per_second": max(r.examples_per_second or 0.0 for r in results),
        "api_ms": 1e3 * api_seconds(rows, crosses, repeats),
    }


def table(log: str, repeats: int) -> str:
    rows = rows_of(log)
    tried = parse_crosses(LOGS[log][2])
    sets = [(), *((cross,) for cross in tried), tried]
    measured = [measure(rows, crosses, repeats) for crosses in sets]
    base = measured[0]
    lines = [
        f"{log} ({len(rows):,} rows)\n",
        "| crosses | log loss | vs none | AUC | features tracked | added | replay examples/s "
        f"| vs none | API hashing of {BODY_ROWS:,} rows, ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in measured:
        change = m["logloss"] / base["logloss"] - 1.0
        speed = m["per_second"] / base["per_second"]
        lines.append(
            f"| {m['crosses']} | {m['logloss']:.6f} | {change:+.2%} | {m['auc']:.4f} | "
            f"{m['features']:,} | {m['features'] - base['features']:+,} | "
            f"{m['per_second']:,.0f} | {speed:.2f}x | {m['api_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.costs.crosses", description=__doc__)
    parser.add_argument("--logs", default=",".join(LOGS), help="which logs, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per configuration")
    args = parser.parse_args(argv)
    for log in args.logs.split(","):
        print(table(log, args.repeats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
