"""The Redis side of a model's feedback stream's reading end (:mod:`workers.feedback`): its
entries read in order from the head with XRANGE, the wait for a new one, its length, and the
failures hash that counts each head entry's deliveries and keeps why entries failed.

The writing end is :mod:`online_ctr.store.ingest`; entries leave the stream with the commit
that learns them (:mod:`online_ctr.store.commits`) or to the dead-letter stream.
"""

from __future__ import annotations

from typing import Any, cast

from online_ctr.store.keys import ModelKeys
from online_ctr.store.redis_types import RedisClient, StreamEntries
from online_ctr.store.scripts import Scripts


class FeedbackReads:
    """Reads of one model's feedback stream, and its entries' delivery counts."""

    def __init__(self, redis: RedisClient, keys: ModelKeys, scripts: Scripts) -> None:
        self._redis: Any = redis
        self._keys = keys
        self._scripts = scripts

    async def entries(self, start: str = "-", count: int = 1) -> StreamEntries:
        """Up to ``count`` entries from ``start`` (``-``: the head; ``(id``: after ``id``)."""
        return cast(StreamEntries, await self._redis.xrange(self._keys.stream, start, count=count))

    async def wait(self, last_seen: bytes, wait_ms: int) -> None:
        """Block up to ``wait_ms`` until an entry newer than ``last_seen`` arrives."""
        await self._redis.xread({self._keys.stream: last_seen}, count=1, block=wait_ms)

    async def length(self) -> int:
        """How many entries wait in the stream."""
        return int(await self._redis.xlen(self._keys.stream))

    async def deliveries(self, entry_id: bytes) -> int:
        """How many deliveries of ``entry_id`` were counted."""
        return int(await self._redis.hget(self._keys.failures, entry_id) or 0)

    async def count_delivery(self, entry_id: bytes | str, change: int = 1) -> int:
        """Count one more delivery of ``entry_id`` (``change=-1``: take one back); how many
        it has had since."""
        return int(await self._redis.hincrby(self._keys.failures, entry_id, change))

    async def reason(self, entry_id: str) -> str | None:
        """The last recorded reason an entry failed, if any."""
        raw: Any = await self._redis.hget(self._keys.failures, f"{entry_id}:why")
        return raw.decode() if raw else None

    async def record_reasons(self, reasons: dict[str, str]) -> None:
        """Remember why entries failed, for when they are dead-lettered."""
        await self._redis.hset(
            self._keys.failures, mapping={f"{entry}:why": why for entry, why in reasons.items()}
        )

    async def dead_letter(self, fence: str, entry_id: str, reason: str) -> bool:
        """Move an entry to the dead-letter stream (if ``fence`` still holds the lease); True
        if moved."""
        keys = self._keys
        moved = await self._scripts.dead_letter(
            keys=[keys.meta, keys.stream, keys.dead, keys.failures], args=[fence, entry_id, reason]
        )
        return bool(moved)
