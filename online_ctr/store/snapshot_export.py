"""Exporting a model to a snapshot file (:mod:`online_ctr.learning.snapshot`) while it keeps
learning:
the file is the model's exact state at one commit, streamed with bounded memory.

How it stays exact without pausing the learner. A commit is first recorded in the redo log
(``octr:{m}:redo``, entry ``<seq>-1``, the absolute new values of the features it touched),
then applied to the shards; an entry is trimmed once every shard has applied it.

1. *Pin* (``snapshot_pin.lua``, atomic on the log side): let ``F`` be the first commit whose
   redo entry is still there (every earlier commit is in every shard), and record the pin
   ``F``: from now on no trim removes an entry ``>= F`` (``pins.lua``) while the pin lives.
2. *Scan* every bucket hash. Each value read is the one written by the last commit applied to
   its shard that touched it: some commit ``k`` with ``k >= `` the last one ``< F`` touching it
   (those were applied before the pin) and ``k <= S1`` below (the commits after ``S1`` are
   finalized after step 3, so applied after every read).
3. *Close* (atomic on the log side): the committed ``S1``, its step ``t``, counters and epoch.
4. *Roll forward*: append the redo entries ``F..S1`` in order. Records are absolute values, so
   a feature any of them touched ends with the value of the last one (its value at ``S1``),
   and a feature none touched kept its value throughout, the one scanned. Later rows replace
   earlier ones in the file, so the file describes exactly the model at commit ``S1``.
   A commit of a model that expires features also deletes some: its record of a deleted
   feature is a row of zeros, ``tau`` 0 included, which the file format reads as a feature
   not stored (:mod:`online_ctr.learning.snapshot`), so a row the scan wrote is taken back.
   A model with a feature budget writes its rows the same way, evicted ones still stored
   included: the close reads the budget's marks at ``S1`` with the rest, and the footer
   carries them, from which a reader judges which rows are of features held.
   A model with a counting Bloom filter of admission has its counters written, and the close
   reads them with the filter's admissions per halving period (the meta's
   ``admitted_recent``), which the footer carries: the copy estimates the features waiting
   for admission as the original does.

The pin has a deadline the export keeps renewing; a pin past it is dropped by the next trim.
If that happened, entries may be gone and the export fails (the stream then ends without its
checksum, so no reader takes it for a snapshot). The redo log grows during an export by the
commits made meanwhile: Redis memory, bounded by how long the export takes.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from online_ctr.learning.admission import parse_recent
from online_ctr.learning.crosses import crosses_text
from online_ctr.learning.snapshot import NONE_ADMITTED, Footer, Header
from online_ctr.learning.snapshot_writer import Writer
from online_ctr.store import snapshot_scan
from online_ctr.store.commits import redo_records
from online_ctr.store.keys import ModelKeys
from online_ctr.store.redis_types import RedisClient, StreamEntries, text
from online_ctr.store.scripts import Scripts
from online_ctr.store.state import ModelSpec, spec_from_meta

#: The pin's lifetime without renewal, and how often an export renews it.
PIN_TTL_MS = 120_000
RENEW_EVERY_S = 10.0
#: Redo entries read per call while rolling forward.
REDO_PAGE = 8


class ModelNotFoundError(LookupError):
    """No model of that name (or one still being imported)."""


class ExportFailedError(RuntimeError):
    """The export could not stay exact (its pin lapsed, or the model was replaced)."""


@dataclass(frozen=True)
class Closed:
    """The model at the instant the scan ended."""

    epoch: str
    seq: int
    t: int
    logloss_sum: str
    nonzero_weights: int
    features_tracked: int
    #: The meta's weight_excess as Redis keeps it ('': the model never learned a weight).
    weight_excess: str = ""
    #: The admission counters at that instant (b'': none).
    counters: bytes = b""
    #: How many times the model had found a feature expired.
    expired: int = 0
    #: Its feature budget's marks (all 0: no budget): the oldest bin kept, the features held
    #: and evicted so far, the cutoffs of zero weights and of all features.
    budget_lowest: int = 0
    held: int = 0
    evicted: int = 0
    cut_zero: int = 0
    cut_all: int = 0
    #: Its admission filter's admissions per halving period (all 0: none, or no filter).
    admitted_recent: tuple[int, ...] = NONE_ADMITTED
    #: The base rate's counts, and the predictions' and labels' sums as Redis keeps them.
    base: tuple[float, float] = (0.0, 0.0)
    sums: tuple[str, str, str, str] = ("", "", "", "")


class Export:
    """One export of one model, pinned from :func:`open_export` until :meth:`chunks` ends."""

    def __init__(
        self, redis: RedisClient, spec: ModelSpec, token: str, epoch: str, commits: tuple[int, int]
    ) -> None:
        self.redis = redis
        self.spec = spec
        self.keys = ModelKeys(spec.name, spec.group)
        self.scripts = Scripts.register(redis)
        self.token = token
        self.epoch = epoch
        self.keep, self.pinned_seq = commits
        self._renewed = time.monotonic()

    async def _pin(self, what: str) -> list[str]:
        return [
            text(part) if isinstance(part, bytes | str) else str(part)
            for part in await self._pin_reply(what)
        ]

    async def _pin_reply(self, what: str) -> list[Any]:
        """snapshot_pin.lua's answer as Redis gave it (the counters are bytes)."""
        keys = self.keys
        reply: list[Any] = await self.scripts.snapshot_pin(
            keys=[keys.meta, keys.redo, keys.pins, keys.expiry, keys.admission],
            args=[what, self.token, PIN_TTL_MS],
        )
        if text(reply[0]) != "ok":
            raise ExportFailedError(
                f"the export of model {self.spec.name!r} took too long to stay exact (its pin "
                "on the redo log lapsed); export again"
            )
        return reply

    async def _renew_if_due(self) -> None:
        if time.monotonic() - self._renewed > RENEW_EVERY_S:
            await self._pin("renew")
            self._renewed = time.monotonic()

    def header(self) -> Header:
        spec = self.spec
        source = {"model": spec.name, "buckets": spec.buckets, "shards": spec.shards}
        return Header(
            spec.rule.name, dict(vars(spec.params)), spec.hash_bits, spec.rule.fields, "export",
            source, spec.encoding, spec.numeric, spec.calibration, spec.admission.text,
            spec.expire_after, spec.max_features, spec.base_rate.text,
            crosses=crosses_text(spec.crosses),
        )  # fmt: skip

    async def chunks(self) -> AsyncIterator[bytes]:
        """The snapshot file, piece by piece (see the module doc)."""
        writer = Writer()
        released = False
        try:
            yield writer.start(self.header())
            scan = snapshot_scan.scan_state(self.redis, self.keys, self.spec.layout, self.scripts)
            async for ids, state in scan:
                yield writer.rows(ids, state)
                await self._renew_if_due()
            closed = await self._close()
            async for ids, state in self._roll_forward(closed.seq):
                yield writer.rows(ids, state)
                await self._renew_if_due()
            await self._pin("release")
            released = True
            if self.spec.admission.counted:
                yield writer.counters(closed.counters)
            yield writer.finish(self._footer(closed))
        finally:
            if not released:
                await self.redis.hdel(self.keys.pins, self.token)

    async def _close(self) -> Closed:
        reply = await self._pin_reply("close")
        parts = [text(part) if isinstance(part, bytes | str) else str(part) for part in reply]
        _, epoch, seq, t, logloss, stable, tracked, expiring, excess = parts[:9]
        counters = reply[9] if isinstance(reply[9], bytes) else str(reply[9]).encode()
        if epoch != self.epoch:
            raise ExportFailedError(
                f"model {self.spec.name!r} was deleted or replaced during the export"
            )
        nonzero = int(stable) + int(expiring)
        expired, lowest, held, evicted, cut_zero, cut_all = (int(p) for p in parts[10:16])
        # Only a counting filter admits through one (a reader refuses admissions without).
        counted = self.spec.admission.counted
        recent = _admitted(parts[16:17]) if counted else NONE_ADMITTED
        clicks, examples, predicted, labels, recent_predicted, recent_labels = parts[17:23]
        return Closed(
            epoch, int(seq), int(float(t)), logloss, nonzero, int(tracked), excess, counters,
            expired, lowest, held, evicted, cut_zero, cut_all, recent,
            (float(clicks), float(examples)),
            (predicted, labels, recent_predicted, recent_labels),
        )  # fmt: skip

    async def _roll_forward(self, through: int) -> AsyncIterator[snapshot_scan.Chunk]:
        """The records of the redo entries ``keep..through``, in commit order."""
        low = f"{self.keep}-0"
        while True:
            entries = cast(
                StreamEntries,
                await self.redis.xrange(
                    self.keys.redo, min=low, max=f"{through}-1", count=REDO_PAGE
                ),
            )
            for _, fields in entries:
                for _, blob in sorted(redo_records(fields)):
                    yield snapshot_scan.records(self.spec.layout, blob)
            if len(entries) < REDO_PAGE:
                return
            low = "(" + text(entries[-1][0])

    def _footer(self, closed: Closed) -> Footer:
        # Which commits the export spans: the model was at pinned_seq when the scan began, at
        # seq when it ended, and the redo entries from rolled_forward_from on were replayed.
        source = {
            "epoch": closed.epoch,
            "seq": closed.seq,
            "pinned_seq": self.pinned_seq,
            "rolled_forward_from": self.keep,
        }
        return Footer(
            closed.t,
            float(closed.logloss_sum),
            closed.nonzero_weights,
            closed.features_tracked,
            source=source,
            logloss_text=closed.logloss_sum,
            weight_excess=closed.weight_excess,
            features_expired=closed.expired,
            features_held=closed.held,
            features_evicted=closed.evicted,
            cut_zero=closed.cut_zero,
            cut_all=closed.cut_all,
            budget_lowest=closed.budget_lowest,
            admitted_recent=closed.admitted_recent,
            base_clicks=closed.base[0],
            base_examples=closed.base[1],
            predicted_sum=closed.sums[0],
            label_sum=closed.sums[1],
            recent_predicted=closed.sums[2],
            recent_labels=closed.sums[3],
        )


def _admitted(parts: list[str]) -> tuple[int, ...]:
    """The meta's ``admitted_recent`` as the close returned it (none: an older script's
    reply); '' (no commit wrote it) or a text that is not finalize.lua's is taken as none
    admitted, as :meth:`~online_ctr.store.state.ModelStore.admission_tally` takes it: it only
    feeds an estimate."""
    try:
        return tuple(parse_recent(parts[0] if parts else None).tolist())
    except ValueError:
        return NONE_ADMITTED


async def open_export(redis: RedisClient, name: str, group: str | None = None) -> Export:
    """Pin model ``name`` (of ``group``) for an export; :class:`ModelNotFoundError` if there
    is none."""
    keys = ModelKeys(name, group)
    token = secrets.token_hex(8)
    scripts = Scripts.register(redis)
    reply = await scripts.snapshot_pin(
        keys=[keys.meta, keys.redo, keys.pins, keys.expiry], args=["pin", token, PIN_TTL_MS]
    )
    if text(reply[0]) != "ok":
        raise ModelNotFoundError(f"no model {name!r} in this Redis")
    meta = {text(k): text(v) for k, v in (await redis.hgetall(keys.meta)).items()}
    try:
        spec = spec_from_meta(name, meta)
    except (KeyError, ValueError):
        await redis.hdel(keys.pins, token)
        raise
    return Export(redis, spec, token, text(reply[1]), (int(reply[2]), int(reply[3])))
