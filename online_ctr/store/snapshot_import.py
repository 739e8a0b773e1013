"""Importing a snapshot file as a model of any name, streamed: memory holds one chunk.

1. The header gives the model's rule, hyper-parameters and hashing; the layout (buckets,
   shards) is the importer's, so a file moves between layouts (the ids are kept, each lands
   in its bucket of the new layout).
2. *Claim* the name (``claim.lua``): refused if a model has it, unless replacing; then its log
   side is deleted and its meta marked ``importing``, which stops anyone from creating,
   serving or learning it (:meth:`ModelStore.ensure` raises :class:`ModelImportingError`).
   Every shard's ``applied`` is set past the old model's last commit before the old buckets
   are deleted, so a late write of the old learner is skipped rather than mixed in.
3. Each chunk of rows is written with ``apply.lua`` as a commit of its own, so a later row of
   an id replaces an earlier one, as the file format says; every row as a new feature, so the
   existence filters, made empty after the claim, end holding them all. A row of a model that
   expires features, or has a feature budget, whose ``tau`` is 0 says the feature is not
   stored: it is deleted.
4. After the checksum: a pass over the written state recounts what the meta needs (features
   stored and held, stable nonzero weights, the expiring set); they must equal the file's
   footer.
   ``finish.lua`` then writes the meta (a new epoch, the file's step and log-loss sum).

A model with a feature budget (:mod:`online_ctr.learning.eviction`) is exact only with its
budget, which the file has in part: the footer's marks, from which the pass of step 4 judges
which rows are of features held (the footer comes last, so a row is written before it can be
judged). It deletes the others, as the learner's sweep would, and rebuilds the budget's counts
from the rows held, each in its class and its bin's slot, the stable nonzero weights counted
apart as the learner's commits count them; the budget's key and marks are written with the
meta, and the expiring weights go in the evictable set too, scored by their last step. The
learner then loads the budget as the exported model's (:meth:`ModelStore.feature_budget`).

A model with a counting Bloom filter of admission gets the file's counters (written when read,
before anyone may read them) and, with the meta, its filter's tally as the learner's commits
write it (:data:`~online_ctr.store.state.TALLY_FIELDS`): the counters above 0, recounted from
those imported, and the footer's admissions per halving period, from which the copy estimates
the features waiting for admission as the original did. A file written before the footer
carried them gives none admitted: the estimate then errs high (it counts the admitted features
the filter still remembers as waiting) until the halving periods they were admitted in have
passed (``bloom:N:D``: at most 8 of ``D`` examples; without halving it stays high).

Anything failing after the claim deletes what was written: no half-imported model remains
(with ``replace``, the old model is gone then too). A model to be recorded in the registry
(:func:`check_name` before the upload is read, :class:`SnapshotImport`'s ``registry``) is
refused before the claim when the registry is full; if a race fills it during the import,
the imported model is deleted: a refused import leaves no key behind.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from online_ctr.learning import eviction
from online_ctr.learning.admission import Admission, Tally
from online_ctr.learning.base_rate import BaseRate
from online_ctr.learning.crosses import crosses_text, parse_crosses
from online_ctr.learning.eviction import STABLE, WEIGHTED, ZERO, Evicting
from online_ctr.learning.nonzero import classify
from online_ctr.learning.rules import get_rule
from online_ctr.learning.rules.base import Array
from online_ctr.learning.snapshot import (
    AdmissionCounters,
    Footer,
    Header,
    Item,
    RowChunk,
    SnapshotError,
)
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.store import snapshot_scan
from online_ctr.store.failures import pipeline
from online_ctr.store.filter import make_filters
from online_ctr.store.keys import ModelKeys
from online_ctr.store.model_config import ModelConfig, config_of
from online_ctr.store.redis_types import RedisClient, text
from online_ctr.store.registry import Registry, RegistryError
from online_ctr.store.scripts import Scripts
from online_ctr.store.shards import StateShards, parse_stamp, stamp
from online_ctr.store.state import (
    BUDGET_MARK_INDEX,
    BUDGET_MARKS,
    TALLY_FIELDS,
    ModelSpec,
    ModelStore,
)

#: Expiring features added to the expiry set (and the evictable set) per call.
ZADD_BATCH = 1000


class ModelExistsError(RuntimeError):
    """The name is taken (and replacing was not asked for)."""


class SpecConflictError(RuntimeError):
    """The file's model is not what the process that must serve it runs."""


@dataclass(frozen=True)
class Imported:
    """What an import created."""

    name: str
    rule: str
    t: int
    features_tracked: int
    nonzero_weights: int
    rows: int


@dataclass
class _Counts:
    #: Features the file stores, and of those the ones the import keeps (with a budget, the
    #: features it holds; else every one).
    stored: int = 0
    tracked: int = 0
    stable: int = 0
    expiring: int = 0
    #: The feature budget rebuilt from the rows held (None: the model has none).
    budget: Evicting | None = None


def last_rows(rows: RowChunk) -> tuple[NDArray[np.uint64], Array]:
    """The chunk's ids and rows, each id once with its last row (a later row of an id replaces
    an earlier one; one commit writes or deletes a feature once)."""
    ids = rows.ids
    _, first_of_reversed = np.unique(ids[::-1], return_index=True)
    if len(first_of_reversed) == len(ids):  # each id once, as an export writes them
        return ids, rows.state
    keep = np.sort(len(ids) - 1 - first_of_reversed)
    return ids[keep], rows.state[keep]


async def check_name(registry: Registry, name: str, register: bool) -> None:
    """Refuse, before anything is written, a name a snapshot cannot be imported as: a group, a
    model of one, or (``register``: a model to be recorded) a new model in a full registry."""
    found = await registry.lookup(name)
    if not isinstance(found, ModelConfig | None) or (found is not None and found.group):
        raise RegistryError(
            f"{name!r} is a group or a model of one; a snapshot is imported as a model of no group"
        )
    # registry.lua refuses a new name at OCTR_MAX_MODELS; asked here too, the import's keys
    # are never written only to be deleted (the refusal after the import stays for a race).
    if not register or found is not None:
        return
    if await registry.redis.hlen(registry.keys.models) >= registry.max_models:
        raise RegistryError(
            f"the service holds its most models ({registry.max_models}, OCTR_MAX_MODELS): "
            "delete one, or raise OCTR_MAX_MODELS"
        )


def spec_differences(header: Header, spec: ModelSpec) -> list[str]:
    """How the file's rule, hyper-parameters and hashing differ from ``spec``'s, as settings."""
    wanted = {
        "rule": spec.rule.name,
        "hash_bits": spec.hash_bits or 64,
        "state_encoding": spec.encoding,
        "numeric": spec.numeric,
        "calibration": spec.calibration,
        "admission": spec.admission.text,
        "expire_after": spec.expire_after,
        "max_features": spec.max_features,
        "base_rate": spec.base_rate.text,
        "crosses": crosses_text(spec.crosses),
        **vars(spec.params),
    }
    got = {
        "rule": header.rule,
        "hash_bits": header.hash_bits or 64,
        "state_encoding": header.encoding,
        "numeric": header.numeric,
        "calibration": header.calibration,
        "admission": header.admission,
        "expire_after": header.expire_after,
        "max_features": header.max_features,
        "base_rate": header.base_rate,
        "crosses": header.crosses,
        **header.params,
    }
    return [
        f"OCTR_{key.upper()}={got.get(key, 'unset')} (served: {wanted.get(key, 'unset')})"
        for key in sorted(set(wanted) | set(got))
        if got.get(key) != wanted.get(key)
    ]


class SnapshotImport:
    """One import into model ``name`` with ``buckets`` and ``shards``; ``expect``, if given,
    is the spec the model must have (the model an API serves: it cannot serve another);
    ``registry``, if given, records the model there once imported (deleted if refused)."""

    def __init__(
        self,
        redis: RedisClient,
        name: str,
        layout: tuple[int, int],
        replace: bool = False,
        expect: ModelSpec | None = None,
        registry: Registry | None = None,
    ) -> None:
        self.redis = redis
        self.name = name
        self.keys = ModelKeys(name)
        self.layout = layout
        self.replace = replace
        self.expect = expect
        self.token = secrets.token_hex(8)
        self.scripts = Scripts.register(redis)
        self.spec: ModelSpec | None = None
        self.shards: StateShards | None = None
        self.registry = registry
        self.seq = 0
        self.gen = 0  # the log generation of the import's commits (_latest_generation)
        self.counters_used = 0  # the imported admission counters above 0
        self.claimed = False
        self.finished = False

    async def run(self, data: AsyncIterator[bytes]) -> Imported:
        """Read the file from ``data`` and import it; raises :class:`SnapshotError` for a bad
        file, :class:`ModelExistsError`, :class:`SpecConflictError`, :class:`RegistryError`."""
        reader = Reader()
        try:
            async for piece in data:
                for item in reader.feed(piece):
                    await self._take(item)
            footer = reader.close()
            imported = await self._finish(footer)
            await self._register()
            return imported
        except BaseException:
            if self.claimed:
                await self._delete()
            elif self.finished:  # a finished model the registry refused
                assert self.spec is not None
                await ModelStore(self.redis, self.spec).delete()
            raise

    async def _register(self) -> None:
        if self.registry is not None:
            assert self.spec is not None
            await self.registry.create(self.name, config_of(self.spec), replace=True)

    async def _take(self, item: Item) -> None:
        if isinstance(item, Header):
            await self._claim(item)
        elif isinstance(item, AdmissionCounters):
            # Written while the name is still being imported: no learner reads them yet.
            await self.redis.set(self.keys.admission, item.counters)
            self.counters_used = len(item.counters) - item.counters.count(0)
        elif isinstance(item, RowChunk) and len(item.ids):
            assert self.spec is not None and self.shards is not None
            self.seq += 1
            ids, state = last_rows(item)
            if self.spec.stepped:  # a row of tau 0 is a feature not stored: no bit
                deleted = state[:, -1] == 0
                records = self.spec.layout.records(ids, state, ~deleted, deleted)
            else:
                records = self.spec.layout.records(ids, state)
            await self.shards.apply(self.seq, records, self.gen)

    async def _claim(self, header: Header) -> None:
        rule = get_rule(header.rule)
        buckets, shards = self.layout
        spec = ModelSpec(
            self.name,
            rule,
            rule.params_type(**header.params),
            header.hash_bits,
            buckets,
            shards,
            header.encoding,
            header.numeric,  # type: ignore[arg-type]
            header.calibration,  # type: ignore[arg-type]
            admission=Admission.parse(header.admission),
            expire_after=header.expire_after,
            max_features=header.max_features,
            base_rate=BaseRate.parse(header.base_rate),
            crosses=parse_crosses(header.crosses),
        )
        try:  # what the registry will record: refused now, before anything is written
            config_of(spec)
        except ValidationError as error:
            problems = "; ".join(str(e["msg"]) for e in error.errors())
            raise SnapshotError(f"the header describes no model to create: {problems}") from None
        if self.expect is not None:
            differ = spec_differences(header, self.expect)
            if differ:
                raise SpecConflictError(
                    f"the file's model differs from the one this service serves as "
                    f"{self.name!r}: {', '.join(differ)}; import it under another name"
                )
        reply = await self.scripts.claim(
            keys=self.keys.log_side(), args=[self.token, "replace" if self.replace else ""]
        )
        status = text(reply[0])
        if status != "ok":
            doing = "is being imported" if status == "importing" else "exists"
            raise ModelExistsError(
                f"model {self.name!r} {doing}; choose another name, or replace it"
            )
        self.claimed = True
        self.spec = spec
        self.shards = StateShards(self.redis, self.keys, spec.layout, self.scripts)
        old_seq, old_shards, existed = (int(part) for part in reply[1:])
        self.seq = old_seq + 1
        self.gen = await self._latest_generation(max(old_shards, shards))
        await self._fence_shards(max(old_shards, shards))
        if existed:
            await self._delete_buckets()
        # Empty filters of the imported layout: every row is written as a new feature, so they
        # end holding every one.
        await make_filters(self.redis, self.keys, spec.layout, drop=max(old_shards, shards))

    async def _latest_generation(self, count: int) -> int:
        """The latest log generation a shard is stamped with (see
        :func:`online_ctr.store.shards.stamp`): the import's commits are of that one, so that
        the shards skip a late write of the old learner as before (:meth:`_fence_shards`)."""
        async with pipeline(self.redis) as pipe:
            for shard in range(count):  # a GET each: a cluster's MGET is of one slot
                pipe.get(self.keys.shard(shard).applied)
            stamps = await pipe.execute()
        return max([0, *(parse_stamp(raw)[1] for raw in stamps)])

    async def _fence_shards(self, count: int) -> None:
        """Every shard skips commits up to the old model's last (a late write of its learner)."""
        async with pipeline(self.redis) as pipe:
            for shard in range(count):
                pipe.set(self.keys.shard(shard).applied, stamp(self.seq, self.gen))
            await pipe.execute()

    async def _delete_buckets(self) -> None:
        pattern = self.keys.bucket_pattern
        keys = [key async for key in self.redis.scan_iter(match=pattern, count=1000)]
        for first in range(0, len(keys), 1000):
            async with pipeline(self.redis) as pipe:
                for key in keys[first : first + 1000]:
                    # One key per call (a call's keys share a slot), queued with
                    # execute_command: the cluster pipeline's unlink is a coroutine.
                    pipe.execute_command("UNLINK", key)
                await pipe.execute()

    async def _delete(self) -> None:
        """Remove what the import wrote, if the name is still its own."""
        if text(await self.redis.hget(self.keys.meta, "importing") or b"") == self.token:
            assert self.spec is not None
            await ModelStore(self.redis, self.spec).delete()

    async def _recount(self, footer: Footer) -> _Counts:
        """Stored, held, stable and expiring features of the written state; the expiring set;
        with a budget, its counts and the evictable set, once the rows of features it does not
        hold are deleted."""
        assert self.spec is not None
        spec, t = self.spec, footer.t
        counts = _Counts(budget=_empty_budget(spec, footer) if spec.max_features else None)
        await self.redis.delete(self.keys.expiry, self.keys.evictable)
        async for ids, state in snapshot_scan.scan_state(
            self.redis, self.keys, spec.layout, self.scripts
        ):
            budget = counts.budget
            counts.stored += len(ids)
            if budget is not None:
                ids, state = await self._held(ids, state, budget)
            marks = None if budget is None else budget.marks
            nonzero, steps = classify(spec.rule, spec.params, state, t, spec.expire_after, marks)
            expiring = nonzero & np.isfinite(steps)
            counts.tracked += len(ids)
            counts.stable += int((nonzero & ~expiring).sum())
            counts.expiring += int(expiring.sum())
            await self._zadd(self.keys.expiry, ids[expiring], steps[expiring])
            if budget is not None:
                _count(spec, budget, state, nonzero & ~expiring)
                # So that the commit that evicts them finds them (finalize.lua).
                await self._zadd(self.keys.evictable, ids[expiring], state[expiring, -1])
        return counts

    async def _held(
        self, ids: NDArray[np.uint64], state: Array, budget: Evicting
    ) -> tuple[NDArray[np.uint64], Array]:
        """The rows of features the budget holds; the others, stored but evicted, are
        deleted (in buckets the scan has read: it goes on unaffected)."""
        assert self.spec is not None and self.shards is not None
        kept = self.spec.held(state, budget.marks)
        if not kept.all():
            gone = ~kept
            count = int(gone.sum())
            deleted = np.ones(count, np.bool_)
            records = self.spec.layout.records(ids[gone], state[gone], ~deleted, deleted)
            self.seq += 1
            await self.shards.apply(self.seq, records, self.gen)
        return ids[kept], state[kept]

    async def _zadd(self, key: str, ids: NDArray[np.uint64], scores: Array) -> None:
        """Add ``ids`` to sorted set ``key`` with ``scores``, in batches."""
        members = ids.astype("<u8")
        for first in range(0, len(members), ZADD_BATCH):
            part = range(first, min(first + ZADD_BATCH, len(members)))
            mapping = {members[i].tobytes(): float(scores[i]) for i in part}
            await self.redis.zadd(key, mapping)

    async def _finish(self, footer: Footer) -> Imported:
        if self.spec is None:
            raise SnapshotError("the file has no header")
        counts = await self._recount(footer)
        nonzero = counts.stable + counts.expiring
        # Without a budget, every feature stored is held.
        holds = footer.features_held if self.spec.max_features else footer.features_tracked
        said = (footer.features_tracked, holds, footer.nonzero_weights)
        if (counts.stored, counts.tracked, nonzero) != said:
            raise SnapshotError(
                f"the file's state has {counts.stored} features stored, {counts.tracked} held "
                f"and {nonzero} nonzero weights at step {footer.t}; its footer says "
                f"{footer.features_tracked}, {holds} and {footer.nonzero_weights}"
            )
        meta = {
            **self.spec.describe(),
            "epoch": secrets.token_hex(8),
            "t": str(footer.t),
            "seq": str(self.seq),
            "logloss_sum": footer.logloss_text or repr(footer.logloss_sum),
            "nnz_stable": str(counts.stable),
            "tracked": str(counts.tracked),
            **({"gen": str(self.gen)} if self.gen else {}),
            **({"weight_excess": footer.weight_excess} if footer.weight_excess else {}),
            **({"expired": str(footer.features_expired)} if footer.features_expired else {}),
            **(await self._write_budget(counts.budget)),
            **self._tally(footer),
            **_base_and_sums(footer),
        }
        args = [self.token, *(part for pair in meta.items() for part in pair)]
        if not await self.scripts.finish(keys=[self.keys.meta], args=args):
            raise ModelExistsError(f"model {self.name!r} was claimed again during the import")
        self.claimed, self.finished = False, True
        return Imported(
            self.name, self.spec.rule.name, footer.t, counts.tracked, nonzero, footer.rows
        )

    def _tally(self, footer: Footer) -> dict[str, str]:
        """The admission filter's tally as finalize.lua writes it in the meta (none for a
        model without a filter)."""
        assert self.spec is not None
        if not self.spec.admission.counted:
            return {}
        recent = np.array(footer.admitted_recent, np.int64)
        used, admitted = Tally(self.counters_used, recent).text().split(" ", 1)
        return dict(zip(TALLY_FIELDS, (used, admitted), strict=True))

    async def _write_budget(self, budget: Evicting | None) -> dict[str, str]:
        """Write the budget's counts (nobody reads them before the import finishes); its
        marks, as the meta fields :meth:`ModelStore.feature_budget` reads them."""
        if budget is None:
            return {}
        await self.redis.set(self.keys.budget, budget.counts.astype("<i8").tobytes())
        marks = budget.marks
        return {
            field: str(int(marks[index]))
            for field, index in zip(BUDGET_MARKS, BUDGET_MARK_INDEX, strict=True)
        }


def _base_and_sums(footer: Footer) -> dict[str, str]:
    """The base rate's counts and the calibration sums as finalize.lua writes them in the
    meta (the counts exactly, as repr; none of what the file does not carry)."""
    fields = {"base_clicks": repr(footer.base_clicks), "base_examples": repr(footer.base_examples)}
    for name in ("predicted_sum", "label_sum", "recent_predicted", "recent_labels"):
        if getattr(footer, name):
            fields[name] = getattr(footer, name)
    return fields


def _empty_budget(spec: ModelSpec, footer: Footer) -> Evicting:
    """A budget of ``spec`` with the footer's marks and no feature counted yet."""
    budget = eviction.feature_budget(spec.max_features)
    budget.marks[:] = footer.marks()
    budget.marks[eviction.TRACKED] = 0
    return budget


def _count(spec: ModelSpec, budget: Evicting, state: Array, stable: NDArray[np.bool_]) -> None:
    """Count held rows ``state`` in ``budget``: each in its class (its weight at its last step
    zero or not) and its bin's slot, those of a ``stable`` weight (one that never reaches zero
    untouched) in :data:`STABLE` too, as the learner's commits count them."""
    slots = budget.slots(state[:, -1])
    classes = np.where(spec.weightless(state), ZERO, WEIGHTED)
    np.add.at(budget.counts, (classes, slots), 1)
    np.add.at(budget.counts[STABLE], slots[stable], 1)
    budget.marks[eviction.TRACKED] += len(state)
