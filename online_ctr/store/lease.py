"""The learner's lease: exactly one worker learns a model at a time.

Sequential learning needs a single writer. Workers take a lease with a TTL (``lease.lua``);
taking a free one bumps the model's fence token, and every commit carries the token it was
learned under, so a learner that lost its lease (stalled past the TTL, cut off) is refused
on its next commit. The others stand by, trying to take the lease every fraction of the TTL,
so a dead learner is replaced within about the TTL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from online_ctr.store.keys import ModelKeys
from online_ctr.store.redis_types import text
from online_ctr.store.scripts import Scripts


@dataclass
class Lease:
    """One worker's hold on a model's lease; ``token`` is set while it holds it."""

    keys: ModelKeys
    scripts: Scripts
    holder: str
    ttl_ms: int
    token: str = ""

    async def hold(self) -> bool:
        """Take the lease if free, or keep it if ours; False if another learner has it."""
        status, value = await self._call(self.token, "")
        self.token = text(value) if text(status) == "held" else ""
        return bool(self.token)

    async def release(self) -> None:
        """Give the lease up so that a standby takes over at once (on an orderly stop)."""
        if self.token:
            await self._call(self.token, "release")
            self.token = ""

    async def _call(self, token: str, mode: str) -> list[Any]:
        reply: list[Any] = await self.scripts.lease(
            keys=[self.keys.meta, self.keys.lease], args=[self.holder, self.ttl_ms, token, mode]
        )
        return reply
