"""Feedback for the benchmarks: the Criteo head file as stream entries, written to Redis the
way ``POST /learn`` writes them, and waiting for the workers to apply them.

>>> from online_ctr.store.codec import decode_entry
>>> blob = entries([({"C1": "68fd1e64"}, 1)])[0]
>>> decode_entry(blob).labels.tolist()
[1.0]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import cycle, islice
from pathlib import Path

import redis

from loadtests.common.processes import wait_until
from online_ctr.learning.features import Example, FeatureHasher
from online_ctr.learning.readers import read_examples
from online_ctr.store.codec import encode_entry
from online_ctr.store.keys import ModelKeys

#: ``../shared/data`` beside the repository, where the data README says it is.
CRITEO = Path("criteo/criteo_kaggle_train_head10k.tsv")
MODEL = ModelKeys("default")

Row = tuple[dict[str, str | float], int]


def criteo_rows(data_dir: Path, limit: int | None = None) -> list[Row]:
    """The Criteo head file as ``(example, label)`` rows, in file order."""
    return list(read_examples(data_dir / CRITEO, "criteo", limit=limit))


def entries(rows: Sequence[tuple[Example, int]], per_entry: int = 1) -> list[bytes]:
    """The rows as stream entries of ``per_entry`` consecutive rows each (a partial last one
    dropped), as the API encodes a ``/learn`` body of that many examples."""
    hasher = FeatureHasher()
    chunks = [rows[start : start + per_entry] for start in range(0, len(rows), per_entry)]
    return [
        encode_entry(hasher.batch([x for x, _ in chunk], [y for _, y in chunk]))
        for chunk in chunks
        if len(chunk) == per_entry
    ]


def cycled(rows: Sequence[Row], count: int) -> list[Row]:
    """``count`` rows: ``rows`` in order, again and again.

    >>> cycled([({"a": "1"}, 0), ({"a": "2"}, 1)], 3)
    [({'a': '1'}, 0), ({'a': '2'}, 1), ({'a': '1'}, 0)]
    """
    return list(islice(cycle(rows), count))


def feed(client: redis.Redis, blobs: Sequence[bytes], count: int, chunk: int = 2000) -> None:
    """XADD ``count`` entries, cycling through ``blobs``, in pipelined chunks."""
    stream = cycle(blobs)
    for start in range(0, count, chunk):
        with client.pipeline(transaction=False) as pipe:
            for blob in islice(stream, min(chunk, count - start)):
                pipe.xadd(MODEL.stream, {"b": blob})
            pipe.execute()


def global_step(client: redis.Redis) -> int:
    """Examples the model has learned (``t`` in its meta hash, read with HGET)."""
    value = client.hget(MODEL.meta, "t")
    return int(value) if value else 0


def wait_for_step(
    client: redis.Redis, target: int, timeout_s: float, check: Callable[[], None] = lambda: None
) -> tuple[float, int]:
    """Poll every 5 ms until the model has learned ``target`` examples: when it happened (a
    ``perf_counter`` time) and how many HGET polls that took.

    ``check`` is called at every poll (to raise if a worker died); ``RuntimeError`` if the
    step does not get there within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    polls = 1
    while (step := global_step(client)) < target:
        check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the workers learned {step} of {target} examples in {timeout_s}s")
        time.sleep(0.005)
        polls += 1
    return time.perf_counter(), polls


def progressive_logloss(client: redis.Redis) -> float | None:
    """The workers' mean progressive log loss so far."""
    t, total = client.hmget(MODEL.meta, ["t", "logloss_sum"])
    return float(total) / int(t) if t and total and int(t) else None


def wait_for_worker(client: redis.Redis, check: Callable[[], None], timeout_s: float = 120) -> None:
    """Wait for a worker's first heartbeat, calling ``check`` meanwhile (a worker may die)."""

    def heartbeat() -> bool:
        check()
        return bool(client.exists(MODEL.workers))

    wait_until(heartbeat, timeout_s, "a worker's first heartbeat")
