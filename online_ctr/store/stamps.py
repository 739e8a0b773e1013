"""The Redis side of the rollback checks (:mod:`workers.rollback`): where the log side and each
state shard are (the log's last commit and generation, each shard's ``applied`` stamp, the last
commit that wrote to each shard), the generation moved past them, shards restamped, and the
reports a rollback leaves in the model's meta for ``/readyz``.
"""

from __future__ import annotations

from dataclasses import dataclass

from online_ctr.store.failures import pipeline
from online_ctr.store.redis_types import text
from online_ctr.store.shards import parse_stamp, stamp
from online_ctr.store.state import ModelStore


@dataclass(frozen=True)
class Positions:
    """The log's last commit and generation, and each shard's stamp, read together."""

    seq: int
    gen: int
    shards: list[tuple[int, int]]

    def ahead(self) -> list[int]:
        """The shards holding a commit the log does not: ahead of it in its generation, or
        stamped with a later one."""
        return [
            i
            for i, (seq, gen) in enumerate(self.shards)
            if gen > self.gen or (gen == self.gen and seq > self.seq)
        ]


@dataclass(frozen=True)
class Reports:
    """What a learner found and repaired, as the meta keeps it (None: nothing found)."""

    #: Of the log side (written by ``generation.lua``).
    log: str | None
    #: Of the state shards.
    shards: str | None


async def positions(store: ModelStore) -> Positions:
    """Read the log's position and every shard's stamp (one pipeline)."""
    async with pipeline(store.redis) as pipe:
        pipe.hmget(store.keys.meta, "seq", "gen")
        for index in range(store.spec.layout.shards):
            pipe.get(store.keys.shard(index).applied)
        (seq, gen), *stamps = await pipe.execute()
    return Positions(int(seq or 0), int(gen or 0), [parse_stamp(raw) for raw in stamps])


async def touched(store: ModelStore) -> dict[int, int]:
    """Per shard, the last commit that wrote to it, as the log side keeps it."""
    fields = await store.redis.hgetall(store.keys.touched)
    return {int(field[1:]): int(seq) for field, seq in fields.items()}


async def move_generation(store: ModelStore, fence: str, seq: int, gen: int, report: str) -> str:
    """Move the log to generation ``gen`` and record ``report`` (``generation.lua``, fenced,
    and only if the log still ends at ``seq``); the script's status (``ok``: done)."""
    reply = await store.scripts.generation(keys=[store.keys.meta], args=[fence, seq, gen, report])
    return text(reply[0])


async def restamp(
    store: ModelStore, stamps: dict[int, tuple[int, int]], report: str | None = None
) -> None:
    """Stamp each shard of ``stamps`` with its (commit, generation), and with ``report``
    record in the meta what happened to the shards (one pipeline)."""
    async with pipeline(store.redis) as pipe:
        for index, (seq, gen) in stamps.items():
            pipe.set(store.keys.shard(index).applied, stamp(seq, gen))
        if report is not None:
            pipe.hset(store.keys.meta, "shard_rollback", report)
        await pipe.execute()


async def reports(store: ModelStore) -> Reports:
    """The rollbacks of the log side and of the state shards a learner recorded."""
    log, shards = await store.redis.hmget(store.keys.meta, "rollback", "shard_rollback")
    return Reports(text(log) if log else None, text(shards) if shards else None)
