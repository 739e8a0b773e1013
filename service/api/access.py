"""The routes' side of a key's grants: may this request use this model or group?

:class:`service.api.middleware.EdgeMiddleware` has checked that the key has the route's scope
on some model, and put the key's :class:`~service.api.scopes.Grants` in the request's scope
under :data:`GRANTS`; a route checks the model or group it names here, before it reads or
writes anything of it. A request to a group is allowed by a grant on the group's name, or
else checked against where it lands: ``/predict`` against the model the group's split picks
for it, ``/learn`` against every model of the group (each learns it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from fastapi import Depends, Path, Request
from starlette.types import Scope

from online_ctr.store.keys import MODEL_NAME
from service.api.errors import ApiError
from service.api.scopes import ALL, NOTHING, Grants

#: The key of the request's grants in its ASGI scope (set by the middleware).
GRANTS = "octr_grants"


class ScopeError(ApiError):
    """The key lacks the scope a request needs on a model or group."""

    status_code = 403

    def __init__(self, grants: Grants, scope: str, name: str, what: str) -> None:
        has = ", ".join(grants.text()) or "nothing"
        super().__init__(
            f"this API key lacks the {scope!r} scope on {name!r} that {what} needs (it has: {has})"
        )


def grants_of(scope: Scope) -> Grants:
    """The request's grants: its key's, every one with auth off, none without a key."""
    grants: Grants | None = scope.get(GRANTS)
    if grants is not None:
        return grants
    return ALL if scope["app"].state.auth is None else NOTHING


def what(scope: Scope) -> str:
    """The request as a 403 names it: method and path."""
    return f"{scope['method']} {scope['path'][:100]}"


def allow(scope: Scope, needed: str, name: str) -> None:
    """Refuse (403) a request whose key lacks ``needed`` on ``name``."""
    grants = grants_of(scope)
    if not grants.allows(needed, name):
        raise ScopeError(grants, needed, name, what(scope))


def allow_landing(scope: Scope, needed: str, group: str, models: Iterable[str]) -> None:
    """Refuse (403) a request to ``group`` unless the key has ``needed`` on the group, or on
    each of ``models``, where the request lands; the 403 names the first it lacks."""
    grants = grants_of(scope)
    if grants.allows(needed, group):
        return
    for name in models:
        if not grants.allows(needed, name):
            raise ScopeError(grants, needed, name, f"{what(scope)} (via group {group!r})")


async def admin_name(
    request: Request,
    name: Annotated[
        str,
        Path(
            pattern=MODEL_NAME.pattern,
            description="The model's or group's name: 1-64 of A-Z a-z 0-9 _ . - (first a "
            "letter or digit).",
        ),
    ],
) -> str:
    """The path's model or group name, once the key's ``admin`` scope is found to cover it."""
    allow(request.scope, "admin", name)
    return name


#: A path's ``{name}`` that the key administers (a 403 otherwise).
AdminName = Annotated[str, Depends(admin_name)]
