"""``/keys``: add, list and revoke API keys while the service runs (``admin`` scope on every
model: a key that administers some models cannot make itself a key of more).

Only the keys' SHA-256 digests are stored, in Redis (:mod:`online_ctr.store.api_keys`); a key
is shown once, in the answer that adds it. Every API process applies a change within
``OCTR_API_KEYS_POLL_S`` and one Redis round trip (:mod:`service.api.key_watch`); this one at
once. ``online-ctr keys`` does the same from the command line.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Request, status

from online_ctr.store.api_keys import ApiKeyError, digest, new_key
from online_ctr.store.api_keys import key_id as id_of
from service.api.access import ScopeError, grants_of, what
from service.api.auth import Authenticator
from service.api.error_schemas import error_responses
from service.api.key_schemas import (
    KeyCreate,
    KeyCreated,
    KeyListResponse,
    KeyRevokedResponse,
    Source,
    key_list,
    stored_info,
)
from service.api.key_watch import KeyWatch
from service.api.scopes import Grants

router = APIRouter(tags=["keys"])

KeyId = Annotated[
    str, Path(pattern=r"^[0-9a-f]{16}$", description="The key's id, as GET /keys lists it.")
]


def _manage(request: Request) -> KeyWatch:
    """This process's key watch, once the request's key is found to administer every model."""
    grants = grants_of(request.scope)
    if not grants.everywhere("admin"):
        raise ScopeError(grants, "admin", "*", what(request.scope))
    watch: KeyWatch | None = request.app.state.key_watch
    if watch is None:
        raise ApiKeyError("authentication is off (OCTR_AUTH=off): this service checks no keys")
    return watch


def static_keys(auth: Authenticator) -> dict[bytes, tuple[Source, Grants]]:
    """The keys of the environment and the file, by digest, with their source."""
    sources: dict[bytes, Any] = auth.sources
    return {found: (sources[found], grants) for found, grants in auth.static.items()}


def _responses(*codes: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """The error answers of ``codes``, with ``meanings`` (``e409=...``) as descriptions."""
    answers = error_responses(*codes)
    for name, meaning in meanings.items():
        answers[int(name[1:])]["description"] = meaning
    return answers


@router.get("/keys", responses=_responses(503))
async def list_keys(request: Request) -> KeyListResponse:
    """Every key this service accepts (never the key: its id), with its scopes, label, when
    it was created and when it was last used (to within OCTR_API_KEYS_LAST_USE_S)."""
    watch = _manage(request)
    await watch.write_last_use(force=True)  # this process's uses are in the answer
    store = watch.store
    stored, used = await store.records(), await store.last_used()
    return key_list(static_keys(watch.auth), stored, used, store.max_keys)


@router.post(
    "/keys",
    status_code=status.HTTP_201_CREATED,
    responses=_responses(
        409,
        415,
        422,
        503,
        e409="OCTR_MAX_API_KEYS keys are stored: revoke some first (nothing was stored).",
        e422="Invalid scopes or label; `errors` names each.",
    ),
)
async def add_key(request: Request, body: Annotated[KeyCreate, Body()]) -> KeyCreated:
    """Make a new key with these scopes and store its digest: the answer shows the key this
    once. Every API process accepts it within OCTR_API_KEYS_POLL_S."""
    watch = _manage(request)
    key = new_key()
    now = int(time.time())
    try:
        await watch.store.add(digest(key), body.scopes, body.label, now)
    except ApiKeyError:
        request.app.state.metrics.api_keys_refused.inc()
        raise
    await watch.reload()
    stored = [s for s in await watch.store.records() if s.id == id_of(digest(key))]
    return KeyCreated(**stored_info(stored[0]).model_dump(), key=key)


@router.delete(
    "/keys/{key_id}",
    responses=_responses(
        404,
        409,
        422,
        503,
        e404="No stored key has that id.",
        e409="The key comes from OCTR_API_KEYS or OCTR_API_KEYS_FILE: read-only here.",
        e422="Not a key id (16 hex digits).",
    ),
)
async def revoke_key(request: Request, key_id: KeyId) -> KeyRevokedResponse:
    """Revoke a stored key: every API process refuses it within OCTR_API_KEYS_POLL_S."""
    watch = _manage(request)
    for found, (source, _) in static_keys(watch.auth).items():
        if found.hex().startswith(key_id):
            raise ApiKeyError(
                f"key {key_id} comes from {source}: it is read-only here; remove it there and "
                "restart the API processes"
            )
    await watch.store.revoke(key_id)
    await watch.reload()
    return KeyRevokedResponse(id=key_id)
