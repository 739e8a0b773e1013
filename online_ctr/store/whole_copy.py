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

from online_ctr.learning.table import StateTable
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Layout
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.scripts import Scripts
from online_ctr.store.snapshot_scan import scan_state

#: Fields read a call, and buckets looked at a call. A pass that calls Redis meanwhile waits
#: behind one call, so a read costs the passes during it about its whole Redis time (~0.2 s
#: for 44,000 features in 2^18 buckets, most of it an HLEN per empty bucket) however it is
#: cut: bigger calls make fewer passes wait. 1,000 fields: about 0.8 ms of Redis's time
#: (1,000,000 features: 811-837 us a call by INFO commandstats, on one of this project's
#: 2-core VMs); 4,096 buckets, a whole shard of the default layout: 2.3-3.3 ms (cut at 1,024,
#: 256 calls of ~1 ms, the single predictions of `make bench-vw-daemon` right after learning
#: had a p99 of 1.09 ms against 0.31); a layout of more buckets is cut to the same.
FIELDS_PER_CALL = 1_000
BUCKETS_PER_CALL = 4_096


@dataclass(frozen=True)
class Whole:
    """Every stored feature of a model, read at or after its commit ``seq`` of ``epoch`` (as
    ``serve.lua`` names it): exact once the records of the commits after ``seq`` are over it."""

    epoch: bytes
    seq: int
    table: StateTable


def epoch_name(epoch: bytes, gen: bytes | None) -> bytes:
    """The epoch as ``serve.lua`` answers it: with the redo log's generation when not 0.

    >>> epoch_name(b"3f2a", None), epoch_name(b"3f2a", b"0"), epoch_name(b"3f2a", b"2")
    (b'3f2a', b'3f2a', b'3f2a/2')
    """
    return epoch + b"/" + gen if gen and int(gen) else epoch


@dataclass(frozen=True)
class Start:
    """Where a read of the whole model starts: its epoch, the commit every shard has
    (``trimmed``), the last commit, and how many features the model tracks."""

    epoch: bytes
    seq: int
    last: int
    tracked: int

    @property
    def settled(self) -> bool:
        """Every commit is in every shard: the learner is idle, or between two commits. A
        read that starts earlier is started again at its first call (the learner, idle,
        trims the log past its ``seq``: workers/committer.py)."""
        return self.seq == self.last


async def start(redis: RedisClient, keys: ModelKeys) -> Start | None:
    """Where to start reading the model whole now; None if it has no epoch (deleted, or
    being imported)."""
    fields = ["epoch", "gen", "trimmed", "seq", "tracked"]
    meta = cast(list[bytes | None], await redis.hmget(keys.meta, fields))  # not decoded
    epoch, gen, trimmed, seq, tracked = meta
    if not epoch:
        return None
    return Start(epoch_name(epoch, gen), int(trimmed or 0), int(seq or 0), int(tracked or 0))


async def read_whole(
    redis: RedisClient,
    keys: ModelKeys,
    layout: Layout,
    scripts: Scripts,
    begun: Start,
    room: int,
) -> Whole | None:
    """The model's every stored feature, read after ``begun`` was, in a table of its own,
    filled a call's features at a time (so that no step holds the event loop for long);
    None if it holds more than ``room``, or if the redo log was trimmed past ``begun`` while
    it was read (its first call would start the copy again)."""
    # Sized for the features the model tracks: no growth (a rehash of every row) on the way.
    table = StateTable(layout.width, capacity=max(begun.tracked, 1024))
    async for ids, state in scan_state(
        redis, keys, layout, scripts, FIELDS_PER_CALL, BUCKETS_PER_CALL
    ):
        if len(table) + len(ids) > room:  # it grew past the room while being read
            return None
        rows = table.rows(ids, create=True)  # first: it may grow the table's arrays
        table.data[rows] = state
    after = await start(redis, keys)
    if after is None or (after.epoch, after.seq) != (begun.epoch, begun.seq):
        return None
    return Whole(begun.epoch, begun.seq, table)
