"""Dependencies of the routes, as ``Annotated`` aliases, and the served-model look-up.

They read what the lifespan put on ``app.state``; all are ``async`` so FastAPI calls them on
the event loop rather than in its thread pool.

``/predict`` and ``/learn`` look their model up with :func:`requested`, a plain call,
rather than a dependency with a declared query parameter: on that path each FastAPI dependency
cost about as much as validating the body (measured), and the benchmark is against a bare
endpoint. :data:`MODEL_PARAMETER` documents the query parameter for them in OpenAPI instead.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from prometheus_client import CollectorRegistry

from online_ctr.store.registry import UnknownNameError
from service.api.access import ScopeError, grants_of, what
from service.api.catalog import Catalog, Served
from service.api.groups import ServedGroup
from service.api.served import ServedModel

#: OpenAPI for the ``model`` query parameter that :func:`requested` reads.
MODEL_PARAMETER: dict[str, Any] = {
    "parameters": [
        {
            "name": "model",
            "in": "query",
            "required": False,
            "description": "The model or group to use; defaults to the service's own model "
            "(OCTR_MODEL).",
            "schema": {"type": "string", "examples": ["default"]},
        }
    ]
}


async def requested(request: Request, needed: str) -> Served:
    """The model or group named by ``?model=`` (default: the own model), or a 404 error; a
    403 if the key lacks ``needed`` on it, unless it is a group, whose caller then checks
    where the request lands (:func:`service.api.access.allow_landing`)."""
    catalog: Catalog = request.app.state.catalog
    # The common case, no query string: no need to parse anything.
    name = request.query_params.get("model") if request.scope["query_string"] else None
    grants = grants_of(request.scope)
    if grants.allows(needed, name or catalog.own.name):
        return catalog.own if name is None else await catalog.get(name)
    # A name the key may not use: a 403 rather than a 404, so that it learns no names, unless
    # it names a group the request may land in through models the key may use.
    found = None if name is None else await _group(catalog, name)
    if found is None:
        raise ScopeError(grants, needed, name or catalog.own.name, what(request.scope))
    return found


async def _group(catalog: Catalog, name: str) -> ServedGroup | None:
    try:
        found = await catalog.get(name)
    except UnknownNameError:
        return None
    return found if isinstance(found, ServedGroup) else None


async def get_catalog(request: Request) -> Catalog:
    """The models and groups this process serves."""
    catalog: Catalog = request.app.state.catalog
    return catalog


async def get_served(request: Request) -> ServedModel:
    """The model this process serves."""
    served: ServedModel = request.app.state.served
    return served


async def get_registry(request: Request) -> CollectorRegistry:
    """The Prometheus registry of this app."""
    registry: CollectorRegistry = request.app.state.registry
    return registry


ServedDep = Annotated[ServedModel, Depends(get_served)]
CatalogDep = Annotated[Catalog, Depends(get_catalog)]
RegistryDep = Annotated[CollectorRegistry, Depends(get_registry)]
