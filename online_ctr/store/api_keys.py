"""API keys stored in Redis while the service runs (``online-ctr keys``, ``/keys``).

Only a key's SHA-256 digest is stored, never the key: per key id (the digest's first 16 hex
digits) a JSON record of the digest, its scope strings, a label and when it was created,
and, written at a bounded rate by the API processes, when it was last used. Every change
moves a version that each API process polls (:mod:`service.api.key_watch`). At most
``OCTR_MAX_API_KEYS`` are stored: one more is refused, and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from online_ctr.store.keys import ApiKeyKeys
from online_ctr.store.redis_types import RedisClient, text
from online_ctr.store.scripts import register

#: Hex digits of a key's digest that name it (64 bits: ids of distinct keys never meet).
ID_DIGITS = 16
#: Random bytes of a key ``add`` makes (43 characters of base64url).
KEY_BYTES = 32


class ApiKeyError(ValueError):
    """A change to the stored keys that was refused; the message says why."""


class UnknownKeyError(ApiKeyError, LookupError):
    """No stored key has that id."""


def digest(key: str) -> bytes:
    """The SHA-256 digest of a key, as it is kept."""
    return hashlib.sha256(key.encode()).digest()


def key_id(found: bytes) -> str:
    """The id a key is listed and revoked by: its digest's first hex digits.

    >>> key_id(digest("not-a-real-key-0000000000"))
    '4061b297c9928583'
    """
    return found.hex()[:ID_DIGITS]


def new_key() -> str:
    """A new API key, random (``secrets.token_urlsafe``)."""
    return secrets.token_urlsafe(KEY_BYTES)


@dataclass(frozen=True)
class StoredKey:
    """One stored key, as listed: never the key itself."""

    id: str
    digest: bytes
    scopes: list[str]
    label: str
    created_s: int
    last_used_s: int | None = None


def _record(raw: bytes | str, used: bytes | str | None, found_id: str) -> StoredKey:
    record = json.loads(raw)
    return StoredKey(
        id=found_id,
        digest=bytes.fromhex(record["digest"]),
        scopes=[str(scope) for scope in record["scopes"]],
        label=str(record["label"]),
        created_s=int(record["created_s"]),
        last_used_s=None if used is None else int(used),
    )


class ApiKeyStore:
    """The stored keys of one Redis."""

    def __init__(self, redis: RedisClient, max_keys: int) -> None:
        self.redis = redis
        self.max_keys = max_keys
        self.keys = ApiKeyKeys()
        self._script = register(redis, "api_keys")
        self._keys = [self.keys.records, self.keys.used, self.keys.version]

    async def add(self, found: bytes, scopes: Sequence[str], label: str, now_s: int) -> str:
        """Store the key of digest ``found``; its id. ApiKeyError at the limit."""
        record = {"digest": found.hex(), "scopes": list(scopes), "label": label, "created_s": now_s}
        args = ["add", key_id(found), json.dumps(record), self.max_keys]
        answer = await self._script(keys=self._keys, args=args)
        outcome = answer[0].decode()
        if outcome == "exists":
            raise ApiKeyError(f"a key with id {key_id(found)} is stored already")
        if outcome == "full":
            raise ApiKeyError(
                f"{int(answer[1])} API keys are stored, the most OCTR_MAX_API_KEYS allows: "
                "revoke keys that are no longer used (keys list shows when each was last "
                "used), or raise OCTR_MAX_API_KEYS"
            )
        return key_id(found)

    async def revoke(self, found_id: str) -> None:
        """Remove the stored key ``found_id``; UnknownKeyError if there is none."""
        answer = await self._script(keys=self._keys, args=["revoke", found_id])
        if answer[0] == b"unknown":
            raise UnknownKeyError(f"no stored API key has id {found_id!r} (keys list shows them)")

    async def version(self) -> int:
        """The version of the stored keys: it moves on every change."""
        return int(await self.redis.get(self.keys.version) or 0)

    async def records(self) -> list[StoredKey]:
        """Every stored key, by id, with when it was last used."""
        records = await self.redis.hgetall(self.keys.records)
        used = await self.redis.hgetall(self.keys.used)
        return sorted(
            (_record(raw, used.get(name), text(name)) for name, raw in records.items()),
            key=lambda stored: (stored.created_s, stored.id),
        )

    async def last_used(self) -> dict[str, int]:
        """When each key (stored or not) was last used, by id."""
        used = await self.redis.hgetall(self.keys.used)
        return {text(name): int(value) for name, value in used.items()}

    async def touch(self, static: Sequence[str], stored: Sequence[str], now_s: int) -> None:
        """Record that the keys ``static`` (environment, file) and ``stored`` were used."""
        if static or stored:
            args = ["touch", now_s, len(static), *static, *stored]
            await self._script(keys=self._keys, args=args)
