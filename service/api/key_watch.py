"""Each API process follows the keys stored in Redis: added and revoked keys are applied
within ``OCTR_API_KEYS_POLL_S`` (1 s) and one Redis round trip, without a restart.

Every poll reads one number, the stored keys' version (:mod:`online_ctr.store.api_keys`),
and reads the records again only when it moved. Every ``OCTR_API_KEYS_LAST_USE_S`` (10 s)
the poll also writes when this process's keys were last used, one command for them all: not
a write per request. With Redis unreachable, the process keeps the keys it last read (a
revocation is then applied once Redis answers again) and logs it once per outage.
"""

from __future__ import annotations

import asyncio
import logging
import time

from online_ctr.config.settings import Settings
from online_ctr.metrics import Metrics
from online_ctr.store.api_keys import ApiKeyStore, key_id
from online_ctr.store.failures import redis_trouble
from service.api.auth import Authenticator
from service.api.scopes import Grants

logger = logging.getLogger(__name__)

#: The records are read again this often even when the version did not move: a Redis that
#: lost its data and counted back up to the same version would otherwise go unnoticed.
FULL_RELOAD_S = 60.0


class KeyWatch:
    """Keeps an :class:`~service.api.auth.Authenticator` in step with the stored keys."""

    def __init__(
        self, auth: Authenticator, store: ApiKeyStore, settings: Settings, metrics: Metrics
    ) -> None:
        self.auth = auth
        self.store = store
        self.poll_s = settings.api_keys_poll_s
        self.last_use_s = settings.api_keys_last_use_s
        self.metrics = metrics
        self.version = -1  # never read
        self._read_at = time.monotonic()
        self._loaded_at = -FULL_RELOAD_S
        self._written_at = time.monotonic()
        self._failing = False
        # One reload at a time: a route's reload after a change and the poll's must not
        # finish in the wrong order, leaving the older keys in place until the next poll.
        self._lock = asyncio.Lock()
        metrics.api_keys_reload_age.set_function(lambda: time.monotonic() - self._read_at)
        self._count()

    def _count(self) -> None:
        self.metrics.api_keys.labels("static").set(len(self.auth.static))
        stored = len(self.auth.keys.keys() - self.auth.static.keys())
        self.metrics.api_keys.labels("stored").set(stored)

    async def reload(self) -> None:
        """Read the version; the records too if it moved."""
        async with self._lock:
            await self._reload()

    async def _reload(self) -> None:
        version = await self.store.version()
        self._read_at = time.monotonic()
        if version == self.version and self._read_at - self._loaded_at < FULL_RELOAD_S:
            return
        stored: dict[bytes, Grants] = {}
        for record in await self.store.records():
            try:
                stored[record.digest] = Grants.parse(record.scopes)
            except ValueError as error:  # written by hand: refused, not fatal
                logger.warning("stored API key %s ignored: %s", record.id, error)
        self.auth.update(stored)
        self.version = version
        self._loaded_at = self._read_at
        self._count()

    async def write_last_use(self, force: bool = False) -> None:
        """Write when this process's keys were last used, at most every OCTR_API_KEYS_LAST_USE_S."""
        now = time.monotonic()
        if not self.auth.used or (not force and now - self._written_at < self.last_use_s):
            return
        used, self.auth.used = self.auth.used, set()
        self._written_at = now
        static = [key_id(found) for found in used if found in self.auth.static]
        stored = [key_id(found) for found in used if found not in self.auth.static]
        await self.store.touch(static, stored, int(time.time()))

    async def poll(self) -> None:
        """One poll: reload if changed, write last use if due; Redis trouble logged once."""
        try:
            await self.reload()
            await self.write_last_use()
        except Exception as error:
            if not redis_trouble(error):
                raise
            if not self._failing:
                logger.warning("stored API keys not read (keeping the last ones): %s", error)
            self._failing = True
            return
        if self._failing:
            logger.info("stored API keys read again")
        self._failing = False

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await self.poll()
            except Exception:  # a bug: said, and the last keys kept
                logger.exception("stored API keys not read")
