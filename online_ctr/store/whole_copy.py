"""Reading a whole model into a serving process's copy (:mod:`online_ctr.store.replica`), so
that a feature the copy lacks is known absent: a ``/predict`` of rows no request sent before
then asks Redis for no feature either, and, while Redis tells of no change, nothing at all.

The meta's ``trimmed`` commit is read first: every shard holds every commit up to it
(``pins.lua``), and the redo log every commit after it. Then every bucket is read
(:func:`~online_ctr.store.snapshot_scan.scan_state`), a few thousand fields a call, while
learning may go on: each bucket shows its shard at some commit from ``trimmed`` on. A redo
record holds a feature's whole value (or its deletion), so the rows read, with the records of
every commit after ``trimmed`` written over them in commit order, are the state as of the
latest commit whatever commit each bucket showed: the copy is exact as of ``trimmed`` in the
sense the copy's next ``serve.lua`` call needs, which brings those records (or starts the copy
again, if they were trimmed meanwhile). A model that tracks more features than the copy has
room for is not read at all, and a read that finds more is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import NDArray

from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Array, Layout
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.scripts import Scripts
from online_ctr.store.snapshot_scan import scan_state


@dataclass(frozen=True)
class Whole:
    """Every stored feature of a model, read at or after its commit ``seq`` of ``epoch`` (as
    ``serve.lua`` names it): exact once the records of the commits after ``seq`` are over it."""

    epoch: bytes
    seq: int
    ids: NDArray[np.uint64]
    state: Array


def epoch_name(epoch: bytes, gen: bytes | None) -> bytes:
    """The epoch as ``serve.lua`` answers it: with the redo log's generation when not 0.

    >>> epoch_name(b"3f2a", None), epoch_name(b"3f2a", b"0"), epoch_name(b"3f2a", b"2")
    (b'3f2a', b'3f2a', b'3f2a/2')
    """
    return epoch + b"/" + gen if gen and int(gen) else epoch


async def read_whole(
    redis: RedisClient, keys: ModelKeys, layout: Layout, scripts: Scripts, room: int
) -> Whole | None:
    """The model's every stored feature; None if it has no epoch (deleted, or being
    imported) or tracks more than ``room`` features."""
    fields = ["epoch", "gen", "trimmed", "tracked"]
    meta = cast(list[bytes | None], await redis.hmget(keys.meta, fields))  # not decoded
    epoch, gen, trimmed, tracked = meta
    if not epoch or int(tracked or 0) > room:
        return None
    ids: list[NDArray[np.uint64]] = []
    state: list[Array] = []
    held = 0
    async for chunk_ids, chunk_state in scan_state(redis, keys, layout, scripts):
        held += len(chunk_ids)
        if held > room:  # it grew past the room while being read
            return None
        ids.append(chunk_ids)
        state.append(chunk_state)
    empty = np.zeros((0, layout.width))
    return Whole(
        epoch_name(epoch, gen),
        int(trimmed or 0),
        np.concatenate(ids) if ids else np.zeros(0, np.uint64),
        np.concatenate(state) if state else empty,
    )
