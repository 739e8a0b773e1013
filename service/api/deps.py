"""Dependencies of the routes, as ``Annotated`` aliases, and the served-model look-up.

They read what the lifespan put on ``app.state``; all are ``async`` so FastAPI calls them on
the event loop rather than in its thread pool.

``/predict`` and ``/learn`` look their model up with :func:`requested_model`, a plain call,
rather than a dependency with a declared query parameter: on that path each FastAPI dependency
cost about as much as validating the body (measured), and the benchmark is against a bare
endpoint. :data:`MODEL_PARAMETER` documents the query parameter for them in OpenAPI instead.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request
from prometheus_client import CollectorRegistry

from service.api.catalog import Catalog, Served
from service.api.served import ServedModel

#: OpenAPI for the ``model`` query parameter that :func:`requested_model` reads.
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


async def requested(request: Request) -> Served:
    """The model or group named by ``?model=`` (default: the own model), or a 404 error."""
    catalog: Catalog = request.app.state.catalog
    if not request.scope["query_string"]:  # the common case: no need to parse anything
        return catalog.own
    name = request.query_params.get("model")
    return catalog.own if name is None else await catalog.get(name)


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
