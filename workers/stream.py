"""Taking entries off a model's feedback stream: new ones, reclaimed ones, dead letters.

Every batch carries the model's *claims* counter as it was before its entries were taken.
Reclaiming (``reclaim.lua``: XAUTOCLAIM and, if it took anything, a bump of the counter, in
one script) is the only way entries change hands, so if the counter has not moved by commit
time no entry can have been taken from us, and the commit script skips checking each entry's
owner, which costs it several microseconds per entry.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from octr.store.keys import GROUP
from octr.store.state import ModelStore

logger = logging.getLogger(__name__)

Message = tuple[bytes, dict[bytes, bytes]]


@dataclass(frozen=True)
class Fetched:
    """Stream entries, and the claims counter read before they were taken."""

    messages: list[Message]
    claims: str


class FeedbackStream:
    """One consumer's view of a model's stream."""

    def __init__(self, store: ModelStore, consumer: str) -> None:
        self.store = store
        self.consumer = consumer
        self.keys = store.keys
        self.redis = store.redis
        script = resources.files("workers").joinpath("reclaim.lua").read_text()
        self._reclaim = self.redis.register_script(script)
        # redis-py turns every stream entry into a dict in Python (~8 us each, profiled);
        # the raw reply is plain nested lists that _messages() unpacks for a fraction.
        self.redis.set_response_callback("XREADGROUP", _raw)

    async def read_new(self, count: int, wait_ms: int, block: bool) -> Fetched:
        """Up to ``count`` new entries, waiting up to ``wait_ms`` (if ``block``) to fill them."""
        messages: list[Message] = []
        deadline = time.monotonic() + wait_ms / 1000
        claims = await self.redis.hget(self.keys.meta, "claims")
        while len(messages) < count:
            left_ms = int((deadline - time.monotonic()) * 1000)
            reply: Any = await self.redis.xreadgroup(
                GROUP,
                self.consumer,
                {self.keys.stream: ">"},
                count=count - len(messages),
                block=left_ms if block and left_ms > 0 else None,
            )
            got = _messages(reply) if reply else []
            messages.extend(got)
            if not got or not block or left_ms <= 0:
                break
        return Fetched(messages, _text(claims))

    async def reclaim(self, min_idle_ms: int, count: int) -> Fetched:
        """Entries idle for ``min_idle_ms`` in any consumer's hands, now ours."""
        claims, entries = await self._reclaim(
            keys=[self.keys.stream, self.keys.meta],
            args=[GROUP, self.consumer, min_idle_ms, count],
        )
        return Fetched(_entries(entries), _text(claims))

    async def deliveries(self, entry_ids: list[bytes]) -> dict[bytes, int]:
        """How often each of our pending entries (ascending ids) has been delivered."""
        pending: Any = await self.redis.xpending_range(
            self.keys.stream,
            GROUP,
            min=entry_ids[0],
            max=entry_ids[-1],
            count=len(entry_ids) + 10_000,
            consumername=self.consumer,
        )
        return {p["message_id"]: int(p["times_delivered"]) for p in pending}

    async def dead_letter(self, message: Message, max_deliveries: int) -> str:
        """Move an entry to the dead-letter stream with its last failure reason; the reason."""
        entry_id, fields = message
        reason: Any = await self.redis.hget(self.keys.failures, entry_id)
        text = reason.decode() if reason else "not committed by any worker"
        text = f"{text} (after {max_deliveries} deliveries)"
        async with self.redis.pipeline(transaction=True) as pipe:
            dead: Any = {**fields, b"entry": entry_id, b"reason": text.encode()}
            pipe.xadd(self.keys.dead, dead)
            pipe.xack(self.keys.stream, GROUP, entry_id)
            pipe.xdel(self.keys.stream, entry_id)
            pipe.hdel(self.keys.failures, entry_id)
            await pipe.execute()
        return text

    async def record_failures(self, failures: dict[str, str]) -> None:
        """Remember why entries failed, for when they are dead-lettered."""
        await self.redis.hset(self.keys.failures, mapping=failures)  # type: ignore[arg-type]


def _text(value: bytes | str | None) -> str:
    if value is None:
        return "0"
    return value.decode() if isinstance(value, bytes) else value


def _raw(response: Any, **options: Any) -> Any:
    return response


def _entries(raw: list[Any]) -> list[Message]:
    """Raw stream entries, ``[id, [field, value, ...]]`` each, as (id, fields) pairs."""
    return [(e[0], dict(zip(e[1][::2], e[1][1::2], strict=True))) for e in raw]


def _messages(reply: Any) -> list[Message]:
    """The entries of a raw XREADGROUP reply for one stream: a RESP3 map, or a RESP2 list
    of ``[stream, entries]``."""
    return _entries(next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1])
