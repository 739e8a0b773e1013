"""A serving process's copy of hot features' state, exact as of the last commit it has seen.

``/predict`` reads the same features again and again (Criteo's rows share most of their
features), and most of a single request's cost in Redis was looking up features this process
had read a moment before. So each pass asks Redis, in one atomic call of ``serve.lua``, for the
model's epoch, commit number, step and calibration fit, for the state of only the features the
copy lacks, and for the records (from the redo log, :mod:`online_ctr.store.commits`) of the commits
since the copy's own, and, of older commits, the records of the shards read that have not
applied them yet (the features read may lack those; the copy's rows have every older commit).
Those records, applied in commit order over the copy's rows and the rows read, give every
feature's state as of the latest commit, exactly: what reading every feature from fully
applied shards would give. When nothing changed and every feature is here, Redis's
whole share of a pass is one HMGET.

The copy starts again, empty, when the model's epoch changes (deleted, or imported from a
snapshot) or a commit it needs is no longer in the redo log (trimmed while this process was
idle); a reply that would carry more than :data:`MOST_COMMITS` commits is refused too, and
after two refusals in a row the pass reads the shards instead (``read`` answers None). The
copy holds at most ``max_features`` rows: past that it is emptied, so memory is bounded by
the setting, never by the model. Single Redis only: on Redis Cluster the redo log and the
shards are in different slots, which no one script can read.

With change notices (:mod:`online_ctr.store.change_notices`), a pass whose features the copy
holds, when Redis has told of no change to the model's meta hash since the call the copy is
exact as of, makes no call at all: it answers from the copy and what that call answered.

A model that fits the copy's room is read into it whole, in a task of its own
(:mod:`online_ctr.store.whole_copy`); from then on the copy takes every commit's records, a new
feature's too, and a feature it lacks is absent: a pass reads no feature from Redis, and
while Redis tells of no change, a request of rows never sent before makes no call either.
The copy stops being whole whenever it starts again; it is read whole again later, spending
at most :data:`WHOLE_READ_SHARE` of the time reading.

>>> import numpy as np
>>> changes = np.array([7, 9, 7], np.uint64), np.array([[1.0], [2.0], [3.0]])
>>> latest(*changes)[0].tolist(), latest(*changes)[1].tolist()
([7, 9], [[3.0], [2.0]])
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from redis.exceptions import RedisError

from online_ctr.learning.budget import Budget
from online_ctr.learning.table import StateTable
from online_ctr.store import whole_copy
from online_ctr.store.change_notices import ChangeNotices
from online_ctr.store.keys import ModelKeys
from online_ctr.store.layout import Array, Layout
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.scripts import Scripts
from online_ctr.store.serve_call import Argument, ServeCall
from online_ctr.store.snapshot_scan import records
from online_ctr.store.whole_copy import Whole

#: The mask of no feature (what a whole copy lacks, as rows to read from Redis).
_NOTHING = np.zeros(0, np.bool_)
logger = logging.getLogger(__name__)

#: Commits whose changes one pass takes; a copy further behind starts again.
MOST_COMMITS = 32
#: Of the time since a whole read began, at most this share is spent reading the model whole
#: (the next read waits 1 / share times as long as the last one took): a copy that keeps
#: starting again (a model learning faster than its predictions come, so that the redo log is
#: trimmed past the copy between them) costs Redis a bounded share of its time.
WHOLE_READ_SHARE = 0.05
#: And at least this many seconds pass before the model is asked again whether it fits;
#: this many, when it fit but its learner was applying a commit (the last of a burst, often).
WHOLE_RETRY_S = 1.0
WHOLE_SETTLE_S = 0.05
#: A copy read whole that starts again sooner than this (the redo log trimmed past it: its
#: model commits faster than predictions come) doubles the wait before the next read, up to
#: 2^WHOLE_MOST_DOUBLINGS times: such a copy would mostly be read to be dropped. One that
#: lasted longer waits the plain wait again.
WHOLE_KEPT_S = 60.0
WHOLE_MOST_DOUBLINGS = 6


def doublings_after(doublings: int, lasted_s: float) -> int:
    """The doublings of the wait before the next whole read, after a whole copy that lasted
    ``lasted_s`` started again.

    >>> doublings_after(0, 5.0), doublings_after(6, 5.0), doublings_after(3, 61.0)
    (1, 6, 0)
    """
    return 0 if lasted_s >= WHOLE_KEPT_S else min(doublings + 1, WHOLE_MOST_DOUBLINGS)


@dataclass(frozen=True)
class Fresh:
    """Features' state as of the latest commit, with the model's step and calibration fit
    (its stored text, None if none) as of that commit."""

    state: Array
    t: int
    calibration_fit: bytes | None
    #: A feature budget's cutoff of all features (:mod:`online_ctr.learning.eviction`).
    cut_all: int = 0
    #: The base rate's counts as of that commit (:mod:`online_ctr.learning.base_rate`).
    base: tuple[float, float] = (0.0, 0.0)


def latest(ids: NDArray[np.uint64], rows: Array) -> tuple[NDArray[np.uint64], Array]:
    """Each id once, with its last row: changes are in commit order, the last one holds."""
    backwards = ids[::-1]
    distinct, first = np.unique(backwards, return_index=True)
    return distinct, rows[::-1][first]


def _overlay(
    ids: NDArray[np.uint64], state: Array, changed: NDArray[np.uint64], rows: Array
) -> None:
    """Write the ``rows`` of ``changed`` ids (distinct) over the rows of ``state`` that are
    theirs (``ids`` distinct too)."""
    order = np.argsort(ids)
    where = np.searchsorted(ids[order], changed).clip(0, max(len(ids) - 1, 0))
    hit = ids[order][where] == changed if len(ids) else np.zeros(len(changed), np.bool_)
    state[order[where[hit]]] = rows[hit]


class StateReplica:
    """The copy of one model's hot features, for one serving process."""

    def __init__(
        self,
        keys: ModelKeys,
        layout: Layout,
        scripts: Scripts,
        max_features: int,
        budget: Budget | None = None,
        notices: ChangeNotices | None = None,
        redis: RedisClient | None = None,
    ) -> None:
        """``budget``: the features of every model's copy together (one process's), past
        which the largest copies start again empty (:mod:`online_ctr.learning.budget`).
        ``notices``: Redis's word that the model changed, which spares a warm pass its call.
        ``redis``: the client to read the whole model with while it fits (None: the copy
        holds only the features passes read)."""
        self.keys = keys
        self._meta = keys.meta  # the key the change notices name (built once: a pass asks)
        self.budget = budget
        self.layout = layout
        self.scripts = scripts
        self.max_features = max_features
        self.table = StateTable(layout.width)
        self.epoch = b""  # no model seen yet: the first call starts the copy
        self.seq = 0
        self.notices = notices
        # What the call the copy is exact as of answered besides the features (step, fit,
        # cutoff, base rate), and where the notices stood when it was sent: while they say
        # nothing more, both are still exact.
        self._answered: tuple[int, bytes | None, int, tuple[float, float]] | None = None
        self._quiet_since: tuple[int, int] | None = None
        #: The copy holds every feature the model stores (as of its commit): a feature it
        #: lacks is absent, its state what the shards answer for one (:mod:`~online_ctr.
        #: store.whole_copy`).
        self.whole = False
        self._redis = redis
        # Writable, as the compiled copy takes it (a read-only array is another type to compile).
        self._absent = layout.values(bytes(layout.value_bytes), 1)[0].copy()
        #: The whole read under way, and when the next may start (time.monotonic()).
        self.reading: asyncio.Task[None] | None = None
        self._read_after = 0.0
        self._read_wait = WHOLE_RETRY_S  # the last read's wait, before doubling
        self._doublings = 0
        self._whole_since = 0.0
        self._held_empty = False  # while a read's table fills, this one keeps nothing
        if budget is not None:
            budget.track(self)
        head: list[Argument] = [
            layout.field_bytes,
            layout.value_bytes,
            *keys.bucket_prefix_parts,
            keys.applied_tail,
        ]
        # serve.lua's arguments but the copy's epoch and commit and the records asked for.
        self._serve = ServeCall(scripts.serve, keys.meta, [MOST_COMMITS, *head], keys.redo)

    def __len__(self) -> int:
        return len(self.table)

    def held(self) -> int:
        """Features in the copy (what the budget counts)."""
        return len(self.table)

    def forget(self) -> None:
        """Start again, empty: exact as of any commit."""
        self.table.clear()
        self.whole = False

    async def read(self, ids: NDArray[np.uint64]) -> Fresh | None:
        """The state of ``ids`` (distinct) as of the latest commit; None if the model has no
        epoch (deleted, or being imported) or commits came faster than two calls: read it
        from the shards then."""
        for _ in range(2):  # a copy that starts again reads everything on the second call
            fresh = await self._read(ids)
            if fresh is not None:
                return fresh
            if not self.epoch:
                return None
        return None

    async def _read(self, ids: NDArray[np.uint64]) -> Fresh | None:
        if not self.whole:
            self._start_whole_read()
        # Copied now: the table may change while Redis answers.
        state, rows = self.table.state_of(ids, self._absent)
        # A whole copy's missing features are absent: nothing to read (no mask to make).
        missing = _NOTHING if self.whole else rows < 0
        lacked = ids[missing] if len(missing) else ids[:0]
        epoch, seq = self.epoch, self.seq
        if len(lacked):
            records_asked = self.layout.reads(lacked).tobytes()
        else:  # the usual pass once warm: nothing to read
            records_asked = b""
            if self._answered is not None and self._quiet():
                return Fresh(state, *self._answered)
        mark = self.notices.mark(self._meta) if self.notices is not None else None
        reply = await self._serve(epoch, seq, records_asked)
        status, new_epoch, new_seq, t, fit, cut_all, clicks, examples, *read = reply
        new_seq = int(new_seq)
        if status == b"reset":
            if (self.epoch, self.seq) == (epoch, seq):  # else moved meanwhile: call again
                self._restart(new_epoch, new_seq)
            return None
        changes, values, _ = read
        if len(lacked):
            state[missing] = self.layout.values(values, len(lacked))
        changed = latest(*records(self.layout, changes)) if changes else None
        if changed is not None:
            _overlay(ids, state, *changed)
        answered = (int(t), fit or None, int(cut_all), (float(clicks), float(examples)))
        read_rows = state[missing] if len(lacked) else state[:0]
        if self._keep(epoch, seq, new_seq, changed, lacked, read_rows):
            self._answered, self._quiet_since = answered, mark
        return Fresh(state, *answered)

    def _quiet(self) -> bool:
        """Whether Redis has told of no change to the model since the call the copy is exact
        as of."""
        notices = self.notices
        return notices is not None and notices.quiet(self._meta, self._quiet_since)

    def _keep(
        self,
        epoch: bytes,
        seq: int,
        new_seq: int,
        changed: tuple[NDArray[np.uint64], Array] | None,
        ids: NDArray[np.uint64],
        state: Array,
    ) -> bool:
        """Bring the copy from commit ``seq`` to ``new_seq`` and add the features it lacked
        (``ids``, their ``state`` as of ``new_seq``), unless another pass moved it meanwhile
        (passes overlap): then it is left as it is, exact as of its own commit. True if the
        copy is now exact as of ``new_seq``."""
        if self.epoch != epoch or not (self.seq == seq or self.seq == new_seq):
            return False
        if self._held_empty:  # the model is being read whole: nothing is kept
            return False
        grew = len(ids) > 0
        if self.seq != new_seq and changed is not None:
            # A whole copy takes every change (a new feature's too); another, its own rows'.
            rows = self.table.rows(changed[0], create=self.whole)
            cached = rows >= 0
            self.table.data[rows[cached]] = changed[1][cached]
            grew |= self.whole
        self.seq = new_seq
        if len(self.table) + len(ids) > self.max_features:
            self.forget()  # empty is exact as of any commit
            if len(ids) > self.max_features:
                return True
        rows = self.table.rows(ids, create=True)  # first: it may grow the table's arrays
        self.table.data[rows] = state
        if self.budget is not None and grew:
            self.budget.fit()
        return True

    def _restart(self, epoch: bytes, seq: int) -> None:
        if self.whole:  # lost to a trim or a new epoch: a read whole again waits longer
            now = time.monotonic()
            self._doublings = doublings_after(self._doublings, now - self._whole_since)
            self._read_after = now + self._read_wait * (1 << self._doublings)
        self.forget()
        self.epoch, self.seq = epoch, seq
        self._answered = self._quiet_since = None

    def _start_whole_read(self) -> None:
        """Start reading the model whole, in a task of its own, unless one is under way, the
        last ended too recently, or there is no client to read with."""
        if self._redis is None or self.reading is not None:
            return
        if time.monotonic() < self._read_after:
            return
        self.reading = asyncio.get_running_loop().create_task(self._read_whole(self._redis))

    async def _read_whole(self, redis: RedisClient) -> None:
        started = time.monotonic()
        wait, read, whole = WHOLE_RETRY_S, False, None
        try:
            room = self._room()
            begun = await whole_copy.start(redis, self.keys)
            if begun is not None and begun.tracked <= room:
                if not begun.settled:  # a commit is being applied: ask again soon
                    wait = WHOLE_SETTLE_S
                else:
                    # Emptied, and kept empty until the read ends (_keep), so that the copy
                    # and the table being read hold no more than the room together.
                    self.forget()
                    read = self._held_empty = True
                    whole = await whole_copy.read_whole(
                        redis, self.keys, self.layout, self.scripts, begun, room
                    )
                    if whole is None:  # trimmed past meanwhile, or larger than the room
                        self._doublings = doublings_after(self._doublings, 0.0)
        except RedisError as error:  # passes read the features they lack meanwhile
            logger.info("copy of %s: cannot read the model whole (%s)", self.keys.meta, error)
        finally:
            if read:
                wait = self._read_wait = max(
                    (time.monotonic() - started) / WHOLE_READ_SHARE, WHOLE_RETRY_S
                )
            self._read_after = started + wait * (1 << self._doublings)
            self.reading, self._held_empty = None, False
        if whole is not None:
            self._install(whole)

    def _room(self) -> int:
        """Features the copy may hold: its bound, less what other models' copies hold."""
        if self.budget is None:
            return self.max_features
        return min(self.max_features, self.budget.limit - self.budget.held() + len(self.table))

    def _install(self, whole: Whole) -> None:
        """Make the copy the model ``whole``; its next pass calls (for the commits since)."""
        self.table = whole.table
        self.epoch, self.seq, self.whole = whole.epoch, whole.seq, True
        self._whole_since = time.monotonic()
        self._answered = self._quiet_since = None
        if self.budget is not None:
            self.budget.fit()
