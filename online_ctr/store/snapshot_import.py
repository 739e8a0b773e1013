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
   expires features whose ``tau`` is 0 says the feature is not stored: it is deleted.
4. After the checksum: a pass over the written state recounts what the meta needs (features
   tracked, stable nonzero weights, the expiring set); they must equal the file's footer.
   ``finish.lua`` then writes the meta (a new epoch, the file's step and log-loss sum).

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

from online_ctr.learning.admission import Admission
from online_ctr.learning.nonzero import classify
from online_ctr.learning.rules import get_rule
from online_ctr.learning.rules.base import Array
from online_ctr.learning.snapshot import (
    AdmissionCounters,
    Footer,
    Header,
    Item,
    Reader,
    RowChunk,
    SnapshotError,
)
from online_ctr.store import snapshot_scan
from online_ctr.store.failures import pipeline
from online_ctr.store.filter import make_filters
from online_ctr.store.keys import ModelKeys
from online_ctr.store.model_config import ModelConfig, config_of
from online_ctr.store.redis_types import RedisClient, text
from online_ctr.store.registry import Registry, RegistryError
from online_ctr.store.scripts import Scripts
from online_ctr.store.shards import StateShards, parse_stamp, stamp
from online_ctr.store.state import ModelSpec, ModelStore

#: Expiring features added to the expiry set per call.
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
    tracked: int = 0
    stable: int = 0
    expiring: int = 0


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
        elif isinstance(item, RowChunk) and len(item.ids):
            assert self.spec is not None and self.shards is not None
            self.seq += 1
            ids, state = last_rows(item)
            if self.spec.expire_after:  # a row of tau 0 is a feature not stored: no bit
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

    async def _recount(self, t: int) -> _Counts:
        """Tracked, stable and expiring features of the written state; the expiring set."""
        assert self.spec is not None
        spec, counts = self.spec, _Counts()
        await self.redis.delete(self.keys.expiry)
        async for ids, state in snapshot_scan.scan_state(
            self.redis, self.keys, spec.layout, self.scripts
        ):
            nonzero, steps = classify(spec.rule, spec.params, state, t, spec.expire_after)
            expiring = nonzero & np.isfinite(steps)
            counts.tracked += len(ids)
            counts.stable += int((nonzero & ~expiring).sum())
            counts.expiring += int(expiring.sum())
            members = ids[expiring].astype("<u8")
            scores = steps[expiring]
            for first in range(0, len(members), ZADD_BATCH):
                part = range(first, min(first + ZADD_BATCH, len(members)))
                mapping = {members[i].tobytes(): float(scores[i]) for i in part}
                await self.redis.zadd(self.keys.expiry, mapping)
        return counts

    async def _finish(self, footer: Footer) -> Imported:
        if self.spec is None:
            raise SnapshotError("the file has no header")
        counts = await self._recount(footer.t)
        nonzero = counts.stable + counts.expiring
        if (counts.tracked, nonzero) != (footer.features_tracked, footer.nonzero_weights):
            raise SnapshotError(
                f"the file's state has {counts.tracked} features and {nonzero} nonzero weights "
                f"at step {footer.t}, its footer says {footer.features_tracked} and "
                f"{footer.nonzero_weights}"
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
        }
        args = [self.token, *(part for pair in meta.items() for part in pair)]
        if not await self.scripts.finish(keys=[self.keys.meta], args=args):
            raise ModelExistsError(f"model {self.name!r} was claimed again during the import")
        self.claimed, self.finished = False, True
        return Imported(
            self.name, self.spec.rule.name, footer.t, counts.tracked, nonzero, footer.rows
        )
