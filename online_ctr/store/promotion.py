"""A group's promotion policy, its promoter's state and the promotions made (``promotion.lua``,
in the registry's slot), and each model's *units*: the progressive log loss of every
``/learn`` call it learned, which the promoter pairs across the group's models.

A model's units are a capped stream (:data:`MOST_UNIT_RECORDS` records, one per commit) written
only while its group has a policy; the promoter trims what it has read. A unit is named by a
64-bit hash of its stream entry's content (the encoded examples, and the impression id of a
joined one): every model of a group receives the same entries, under different entry ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from online_ctr.learning.pairing import Units
from online_ctr.learning.promotion import Paired
from online_ctr.store.keys import ModelKeys, RegistryKeys
from online_ctr.store.model_config import PolicyBody
from online_ctr.store.redis_types import RedisClient, StreamEntries, text
from online_ctr.store.registry import GroupInfo, UnknownNameError
from online_ctr.store.scripts import register

#: Unit records a model keeps (about; one per commit): a promoter that falls further behind
#: loses the oldest, which only makes its test see fewer pairs.
MOST_UNIT_RECORDS = 64
#: Promotions the log keeps (about), over every group.
MOST_PROMOTIONS = 1_000


@dataclass
class PromoterState:
    """What a group's promoter has read and tallied: the champion its pairs are against, per
    model the last unit record read, and per challenger its tally."""

    champion: str
    cursors: dict[str, str] = field(default_factory=dict)
    pairs: dict[str, Paired] = field(default_factory=dict)

    def encode(self) -> str:
        pairs = {name: list(paired.as_tuple()) for name, paired in self.pairs.items()}
        return json.dumps({"champion": self.champion, "cursors": self.cursors, "pairs": pairs})

    @classmethod
    def decode(cls, raw: str) -> PromoterState | None:
        """The stored state; None if there is none (or it does not decode: started afresh)."""
        try:
            record = json.loads(raw)
            pairs = {str(k): _paired(v) for k, v in (record.get("pairs") or {}).items()}
            cursors = {str(k): str(v) for k, v in (record.get("cursors") or {}).items()}
            return cls(str(record["champion"]), cursors, pairs)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def _paired(values: list[float]) -> Paired:
    units, examples, mean, m2, champion, challenger = values
    return Paired(int(units), int(examples), mean, m2, champion, challenger)


class Promotions:
    """Reads and changes the groups' policies, promoter states and promotions."""

    def __init__(self, redis: RedisClient) -> None:
        self.redis = redis
        self.keys = RegistryKeys()
        self._script = register(redis, "promotion")

    async def _run(self, *args: object) -> tuple[str, str]:
        keys = [self.keys.groups, self.keys.tallies, self.keys.promotions]
        outcome, detail = await self._script(keys=keys, args=args)
        return text(outcome), text(detail)

    async def set_policy(self, group: str, policy: PolicyBody | None) -> GroupInfo:
        """Give ``group`` the ``policy`` (None: no automatic promotion); its test restarts."""
        raw = "" if policy is None else policy.model_dump_json()
        outcome, detail = await self._run("policy", group, raw)
        if outcome == "unknown":
            raise UnknownNameError(f"no group {group!r}")
        return GroupInfo.decode(group, detail)

    async def state(self, group: str) -> tuple[str, PromoterState | None]:
        """The stored state of ``group``'s promoter, raw (for a compare and set) and decoded."""
        raw = text(await self.redis.hget(self.keys.tallies, group) or b"")
        return raw, PromoterState.decode(raw) if raw else None

    async def tally(self, group: str, expected: str, state: PromoterState) -> bool:
        """Store ``state`` if the stored one is still ``expected``; False if it moved."""
        outcome, _ = await self._run("tally", group, expected, state.encode(), MOST_PROMOTIONS)
        return outcome == "tallied"

    async def promote(
        self,
        group: str,
        champion: str,
        to: str,
        expected: str,
        state: PromoterState,
        record: dict[str, object],
    ) -> GroupInfo | None:
        """Make ``to`` serve ``group`` in place of ``champion``, log the promotion with
        ``record`` and store ``state`` (its tallies restarted); None if anything moved."""
        fields = json.dumps({"from": champion, "to": to, **record})
        outcome, detail = await self._run(
            "promote", group, expected, champion, to, state.encode(), fields, MOST_PROMOTIONS
        )
        return GroupInfo.decode(group, detail) if outcome == "promoted" else None

    async def recent(self, group: str, count: int = 10) -> list[dict[str, str]]:
        """The last ``count`` promotions of ``group``, newest first."""
        found: list[dict[str, str]] = []
        entries = cast(
            StreamEntries,
            await self.redis.xrevrange(self.keys.promotions, count=MOST_PROMOTIONS),
        )
        for entry_id, fields in entries:
            record = {text(k): text(v) for k, v in fields.items()}
            if record.get("group") == group:
                found.append({"id": text(entry_id), **record})
                if len(found) == count:
                    break
        return found

    async def forget(self, group: str) -> None:
        """Drop the promoter's state of a group that ended."""
        await self.redis.hdel(self.keys.tallies, group)


async def write_units(redis: RedisClient, keys: ModelKeys, units: Units) -> None:
    """Record the units of one commit of the model."""
    await redis.xadd(
        keys.units,
        {"k": units.keys.tobytes(), "n": units.examples.tobytes(), "l": units.losses.tobytes()},
        maxlen=MOST_UNIT_RECORDS,
        approximate=True,
    )


async def read_units(
    redis: RedisClient, keys: ModelKeys, after: str, count: int
) -> list[tuple[str, Units]]:
    """Up to ``count`` unit records of the model after the record ``after`` ('0': all)."""
    start = "-" if after == "0" else f"({after}"
    records = cast(StreamEntries, await redis.xrange(keys.units, start, "+", count=count))
    return [(text(record_id), _units(fields)) for record_id, fields in records]


def _units(fields: dict[bytes, bytes]) -> Units:
    unit_keys = np.frombuffer(fields.get(b"k", b""), np.uint64)
    examples = np.frombuffer(fields.get(b"n", b""), np.int64)
    losses = np.frombuffer(fields.get(b"l", b""), np.float64)
    if not (len(unit_keys) == len(examples) == len(losses)):  # not ours: read as none
        return Units.empty()
    return Units(unit_keys, examples, losses)


async def trim_units(redis: RedisClient, keys: ModelKeys, through: str) -> None:
    """Drop the model's unit records before ``through`` (read already)."""
    if through != "0":
        await redis.xtrim(keys.units, minid=through, approximate=False)
