"""Committing learned state: the redo log on the model's log side, then the shards.

A commit is two steps, because on Redis Cluster the state of one group of examples spans
many slots and no script may touch more than one. ``finalize.lua`` first records the group's
new feature values in the redo log, moves the step and counters and deletes the learned stream
entries, in one atomic call fenced by the learner's token: from then on the group is learned,
exactly once. Then ``apply.lua`` writes the values into their shards, each shard skipping a
commit it already has. If the learner dies in between, the next one replays the redo log
before it reads any state (:meth:`CommitLog.pending`), and replaying is idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.admission import COUNTERS
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Array
from online_ctr.store.redis_types import RedisClient, StreamEntries
from online_ctr.store.scripts import Scripts
from online_ctr.store.shards import Runs


@dataclass(frozen=True)
class CounterChange:
    """Counters of a model's counting Bloom filter (feature admission) a group changed:
    where they are, and their values after it; or the ``whole`` filter after it, for a group
    that halved them all (``bloom:N:D``) or changed more than :data:`WHOLE_FILTER_ABOVE`."""

    positions: NDArray[np.int64]
    values: NDArray[np.uint8]
    whole: NDArray[np.uint8] | None = None
    #: The filter's :class:`~online_ctr.learning.admission.Tally` after the group, as
    #: ``finalize.lua``'s ARGV[26] takes it ('': the model has no filter).
    tally: str = ""

    def args(self) -> list[bytes | int]:
        """``finalize.lua``'s ARGV[16..18]: positions and values, or '' and the whole."""
        if self.whole is not None:
            return [b"", self.whole.tobytes(), COUNTERS]
        return [self.positions.astype("<u4").tobytes(), self.values.tobytes(), COUNTERS]

    @classmethod
    def replacing(cls, whole: NDArray[np.uint8], tally: str = "") -> CounterChange:
        """The change that writes the ``whole`` filter."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.uint8), whole, tally)


NO_COUNTERS = CounterChange(np.zeros(0, np.int64), np.zeros(0, np.uint8))
#: Above this many changed counters a commit writes the whole filter (one SET of 4 MiB, a few
#: ms) rather than each counter (a BITFIELD op that finalize.lua builds in Lua: about 2 us
#: each, 65 s of Redis time for the 33M counters of 1M churning examples, measured with
#: ``loadtests.bench.quarter --only bloom:2``); a group of a churning stream changes 100,000s.
WHOLE_FILTER_ABOVE = COUNTERS // 256


@dataclass(frozen=True)
class BudgetChange:
    """What a group changed of a model's feature budget (:mod:`online_ctr.learning.
    eviction`): the slots of its counts (flat, int64 each) and their values, or the ``whole``
    counts (more than :data:`WHOLE_BUDGET_ABOVE` changed); its marks after the group (the
    oldest bin kept, the features held and the two cutoffs), the features it evicted, and
    the last steps of the ids entering the expiry set (the budget's ``evictable`` set scores
    them so). ``size``, the count of slots, is 0 for a model without a budget."""

    size: int
    slots: NDArray[np.int64]
    values: NDArray[np.int64]
    marks: tuple[int, int, int, int] | None = None
    evicted: int = 0
    entering_steps: Array | None = None
    whole: NDArray[np.int64] | None = None

    def args(self) -> list[bytes | int | str]:
        """``finalize.lua``'s ARGV[20..25]."""
        if not self.size:
            return [b"", b"", 0, "", 0, b""]
        assert self.marks is not None and self.entering_steps is not None
        slots, values = self.slots.astype("<u4").tobytes(), self.values.astype("<i8").tobytes()
        if self.whole is not None:
            slots, values = b"", self.whole.astype("<i8").tobytes()
        marks = " ".join(str(int(mark)) for mark in self.marks)
        steps = self.entering_steps.astype("<f8").tobytes()
        return [slots, values, self.size, marks, self.evicted, steps]


NO_BUDGET = BudgetChange(0, np.zeros(0, np.int64), np.zeros(0, np.int64))
#: Above this many changed slots a commit writes the whole counts (one SET of 384 KiB at the
#: default window) rather than a SETRANGE per slot, which ``finalize.lua`` makes one by one.
WHOLE_BUDGET_ABOVE = 4096


@dataclass(frozen=True)
class StateChange:
    """A learned group's effect, computed from the model at step ``t`` (epoch ``epoch``)."""

    t: int
    epoch: str
    examples: int
    logloss_sum: float
    entries: list[str]
    runs: Runs
    leaving: NDArray[np.uint64]
    entering: NDArray[np.uint64]
    entering_steps: Array
    stable_delta: int
    tracked_delta: int
    #: The sum over the examples of (importance weight - 1): 0 when none has a weight, so the
    #: examples' total weight is ``examples + weight_excess``.
    weight_excess: float = 0.0
    #: The admission counters the group changed and their values (:class:`CounterChange`).
    counters: CounterChange = NO_COUNTERS
    #: The calibration refitted over the group (:mod:`online_ctr.store.calibration_codec`), if any:
    #: the fit's text and the histogram's bytes.
    calibration: tuple[str, bytes] | None = None
    #: Features the group found expired, and features it deletes as expired
    #: (:mod:`online_ctr.learning.retention`).
    expired: int = 0
    #: What the group changed of the model's feature budget (:class:`BudgetChange`).
    budget: BudgetChange = NO_BUDGET
    #: The base rate's counts ``(clicks, examples)`` after the group
    #: (:mod:`online_ctr.learning.base_rate`); None: not written.
    base: tuple[float, float] | None = None
    #: The group's importance-weighted sums of its predictions and of its labels, then the
    #: model's over the recent window after it (:func:`~online_ctr.learning.stream_metrics.
    #: decayed_sums`).
    sums: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Commit:
    """What the finalize script answered: ``ok``, ``conflict``, ``fenced``, ``refused`` (an
    argument was bad: the group's) or ``damaged`` (a value stored in the model's meta is not
    one finalize writes: no commit applies until it is mended); ``reason`` says why for the
    last two. Anything but ``ok`` wrote nothing."""

    status: str
    seq: int = 0
    t: int = -1
    nonzero_weights: int = 0
    features_tracked: int = 0
    logloss_sum: float = 0.0
    reason: str = ""


def _ids(ids: NDArray[np.uint64]) -> bytes:
    return ids.astype("<u8").tobytes()


class CommitLog:
    """Finalizing commits and reading back the ones not yet applied everywhere."""

    def __init__(self, redis: RedisClient, keys: ModelKeys, scripts: Scripts) -> None:
        self.redis = redis
        self.keys = keys
        self.scripts = scripts

    async def finalize(self, change: StateChange, fence: str, applied_through: int) -> Commit:
        """Record ``change`` as learned (see the module doc); ``applied_through`` is the last
        commit every shard has applied, whose redo entries can go."""
        keys = self.keys
        redo = [part for shard, blob in change.runs for part in (f"s{shard}", blob)]
        fit, histogram = change.calibration or ("", b"")
        reply = await self.scripts.finalize(
            keys=keys.finalize_keys(),
            args=[
                fence,
                change.t,
                change.epoch,
                change.examples,
                repr(change.logloss_sum),
                " ".join(change.entries),
                _ids(change.leaving),
                _ids(change.entering),
                change.entering_steps.astype("<f8").tobytes(),
                change.stable_delta,
                change.tracked_delta,
                applied_through,
                fit,
                histogram,
                repr(change.weight_excess) if change.weight_excess else "0",
                *change.counters.args(),
                change.expired,
                *change.budget.args(),
                change.counters.tally,
                "" if change.base is None else f"{change.base[0]!r} {change.base[1]!r}",
                " ".join(repr(total) for total in change.sums),
                *redo,
            ],
        )
        status = reply[0].decode()
        if status in ("refused", "damaged"):
            return Commit(status, reason=reply[1].decode(errors="replace"))
        if status != "ok":
            return Commit(status)
        seq, t, nonzero, tracked, logloss = reply[1:]
        return Commit(status, int(seq), int(t), int(nonzero), int(tracked), float(logloss))

    async def pending(self) -> list[Pending]:
        """Every commit still in the redo log, oldest first, with its records per shard."""
        entries = cast(StreamEntries, await self.redis.xrange(self.keys.redo))
        return [
            Pending(int(entry_id.split(b"-")[0]), _runs(fields), _prior(fields))
            for entry_id, fields in entries
        ]

    async def trim(self, through: int) -> None:
        """Forget redo entries up to commit ``through`` (every shard has applied them), but
        none a snapshot export still needs (``pins.lua``)."""
        await self.scripts.trim(
            keys=[self.keys.redo, self.keys.pins, self.keys.meta], args=[through]
        )


#: The redo entry's field of its shards' previous commits (``finalize.lua``).
PRIOR = b"prior"


class Pending(NamedTuple):
    """A commit in the redo log: its number, its records per shard, and per shard the commit
    that wrote to it before (0: none; or an entry written before they were kept)."""

    seq: int
    runs: Runs
    prior: dict[int, int]


def redo_records(fields: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    """A redo entry's fields of records (``s<shard>``), without its ``prior``."""
    return [(name, blob) for name, blob in fields.items() if name != PRIOR]


def _runs(fields: dict[bytes, bytes]) -> Runs:
    return sorted((int(name[1:]), blob) for name, blob in redo_records(fields))


def _prior(fields: dict[bytes, bytes]) -> dict[int, int]:
    """The ``prior`` field, ``s<shard>:<commit> ...``, by shard."""
    pairs = (part.split(b":") for part in fields.get(PRIOR, b"").split())
    return {int(name[1:]): int(seq) for name, seq in pairs}
