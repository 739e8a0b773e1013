"""Bodies of ``/keys`` (and ``online-ctr keys``): a key to add, a key added (shown once), the
keys listed (never a key, only its id) and a key revoked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from online_ctr.store.api_keys import StoredKey, key_id
from service.api.scopes import Grants

#: Where a listed key comes from: the two static sources are read-only.
Source = Literal["stored", "OCTR_API_KEYS", "OCTR_API_KEYS_FILE"]
MOST_SCOPES = 64


def when(seconds: int | None) -> str | None:
    """Unix seconds as ISO 8601 in UTC.

    >>> when(0), when(None)
    ('1970-01-01T00:00:00Z', None)
    """
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def checked_scopes(scopes: list[str]) -> list[str]:
    """The scope strings as stored: checked, sorted, implied ones not added."""
    Grants.parse(scopes)  # a ValueError that names the bad one
    return sorted(set(scopes))


class KeyCreate(BaseModel):
    """A key to add: its scopes (``learn:ads-*``, ``predict``, ...) and a label."""

    model_config = ConfigDict(extra="forbid")

    scopes: Annotated[list[str], Field(min_length=1, max_length=MOST_SCOPES)]
    label: Annotated[str, Field(max_length=200, pattern=r"^[^\x00-\x1f\x7f]*$")] = ""

    @field_validator("scopes")
    @classmethod
    def _known(cls, scopes: list[str]) -> list[str]:
        return checked_scopes(scopes)


class KeyInfo(BaseModel):
    """A key as listed: never the key, its id (its digest's first 16 hex digits)."""

    id: str
    source: Source
    scopes: list[str]
    label: str = ""
    created_at: str | None = None
    last_used_at: str | None = None


class KeyCreated(KeyInfo):
    """A key added: ``key`` is shown this once, and never stored."""

    key: str


class KeyListResponse(BaseModel):
    """Every key: the static ones (environment, file: read-only) and the stored ones."""

    keys: list[KeyInfo]
    stored: int
    max_stored: int


class KeyRevokedResponse(BaseModel):
    """A stored key revoked: every API process refuses it within OCTR_API_KEYS_POLL_S."""

    id: str
    revoked: bool = True


def stored_info(stored: StoredKey) -> KeyInfo:
    return KeyInfo(
        id=stored.id,
        source="stored",
        scopes=stored.scopes,
        label=stored.label,
        created_at=when(stored.created_s),
        last_used_at=when(stored.last_used_s),
    )


def key_list(
    static: dict[bytes, tuple[Source, Grants]],
    stored: list[StoredKey],
    last_used: dict[str, int],
    max_stored: int,
) -> KeyListResponse:
    """The answer of ``GET /keys`` and ``online-ctr keys list``."""
    keys = [
        KeyInfo(
            id=key_id(found),
            source=source,
            scopes=grants.text(),
            last_used_at=when(last_used.get(key_id(found))),
        )
        for found, (source, grants) in static.items()
    ]
    keys += [stored_info(each) for each in stored if each.digest not in static]
    return KeyListResponse(keys=keys, stored=len(stored), max_stored=max_stored)
