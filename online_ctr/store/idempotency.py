"""Idempotency-Key records of a feedback tag, bounded in count.

Each ``/learn`` with an ``Idempotency-Key`` leaves a record ``octr:{tag}:idem:<key>`` for the
idempotency window, and an entry in the tag's index, a sorted set of the keys scored by when
each record was written (Redis's clock, in microseconds). ``append.lua`` and ``join.lua``
write both in the script that appends (see ``idempotency.lua``), so record and index never
disagree. At ``OCTR_MAX_IDEMPOTENCY_KEYS`` records a new one drops the oldest first: their
retry window is shortened, and a retry of a dropped key is appended again. Entries of records
that expired are pruned by the same scripts, so the index is bounded too. A script drops at
most 1,000 entries a call (a lowered limit, or a day of expired entries, is worked off over
calls), so the gauge, ZCARD of the index, may count records expired since its last write.

>>> limits = KeyLimits(window_s=600, most=1000)
>>> script_args(FeedbackKeys.of("default", None), limits)
[1000, 'octr:{default}:idem:']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from online_ctr.config.settings import Settings
from online_ctr.store.keys import FeedbackKeys
from online_ctr.store.redis_types import RedisClient, text

#: Index entries read per page when a model's records are deleted.
PAGE = 1000


@dataclass(frozen=True)
class KeyLimits:
    """How long an Idempotency-Key is remembered, and how many are, per feedback tag."""

    window_s: int
    most: int

    @classmethod
    def of(cls, settings: Settings) -> KeyLimits:
        """``OCTR_IDEMPOTENCY_WINDOW_S`` and ``OCTR_MAX_IDEMPOTENCY_KEYS``."""
        return cls(settings.idempotency_window_s, settings.max_idempotency_keys)


def script_args(keys: FeedbackKeys, limits: KeyLimits) -> list[int | str]:
    """The arguments ``idempotency.lua`` reads (ARGV[6] and ARGV[7] of append and join)."""
    return [limits.most, keys.idempotency("")]


async def held(redis: RedisClient, keys: FeedbackKeys) -> int:
    """How many records the tag's index holds (those expired since its last write included:
    they are pruned by the next keyed request)."""
    return int(await redis.zcard(keys.idempotency_index))


async def forget(redis: RedisClient, keys: FeedbackKeys) -> int:
    """Delete every record the tag's index lists, then the index (a model of no group is
    deleted); returns how many keys were deleted. Paged: Redis is never busy for long."""
    deleted = 0
    while members := cast(list[bytes], await redis.zrange(keys.idempotency_index, 0, PAGE - 1)):
        names = [text(member) for member in members]
        # One UNLINK of many keys: they share the tag's slot, so a cluster takes it too (its
        # pipelines queue an UNLINK only when awaited).
        deleted += int(await redis.unlink(*map(keys.idempotency, names)))
        await redis.zrem(keys.idempotency_index, *names)
    return deleted + int(await redis.unlink(keys.idempotency_index))
