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

from service.api.errors import UnknownModelError
from service.api.served import ServedModel

#: OpenAPI for the ``model`` query parameter that :func:`requested_model` reads.
MODEL_PARAMETER: dict[str, Any] = {
    "parameters": [
        {
            "name": "model",
            "in": "query",
            "required": False,
            "description": "The model to use; defaults to the one this process serves.",
            "schema": {"type": "string", "examples": ["default"]},
        }
    ]
}


def not_served(name: str, served: ServedModel) -> UnknownModelError:
    """The 404 for a model this process does not serve."""
    return UnknownModelError(
        f"model {name!r} is not served here; this process serves {served.name!r}"
    )


def requested_model(request: Request) -> ServedModel:
    """The model named by ``?model=`` (default: the served one), or a 404 error."""
    served: ServedModel = request.app.state.served
    if not request.scope["query_string"]:  # the common case: no need to parse anything
        return served
    name = request.query_params.get("model")
    if name is not None and name != served.name:
        raise not_served(name, served)
    return served


async def get_served(request: Request) -> ServedModel:
    """The model this process serves."""
    served: ServedModel = request.app.state.served
    return served


async def get_registry(request: Request) -> CollectorRegistry:
    """The Prometheus registry of this app."""
    registry: CollectorRegistry = request.app.state.registry
    return registry


ServedDep = Annotated[ServedModel, Depends(get_served)]
RegistryDep = Annotated[CollectorRegistry, Depends(get_registry)]
