"""A group's challengers (admin scope): ``POST /groups/{name}/sweep`` creates a grid of them
in one call, ``PUT /groups/{name}/promotion`` lets the best one replace the serving model by
itself, and ``DELETE`` of it stops that. ``GET /groups/{name}`` shows their standings.

Each operation is :mod:`online_ctr.challengers`', as ``online-ctr models sweep|promotion``
runs it.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, status

from online_ctr.challengers import (
    SweepValueError,
    challengers,
    set_policy,
    sweep,
    sweep_configs,
)
from online_ctr.store.model_config import PolicyBody
from service.api.access import AdminName, allow
from service.api.challenger_schemas import SweepRequest, SweepResponse, SweptModel
from service.api.deps import CatalogDep
from service.api.limits import InvalidFieldError
from service.api.listing import group_detail
from service.api.model_schemas import GroupDetailResponse
from service.api.routes.models import AdminDep, _errors

router = APIRouter(tags=["models"])


@router.post(
    "/groups/{name}/sweep",
    status_code=status.HTTP_201_CREATED,
    responses=_errors(409, 415, 422, 503),
)
async def sweep_group(
    name: AdminName,
    request: Annotated[SweepRequest, Body()],
    http: Request,
    catalog: CatalogDep,
    admin: AdminDep,
) -> SweepResponse:
    """Create a model of the group for every combination of the grid's values (the group is
    created with the first one if new, which then serves it). Refused whole, before any model
    is created, if OCTR_MAX_MODELS cannot hold the new ones; a model that exists alike is
    kept. With ``promotion``, the group gets that policy too."""
    grid = {str(param): values for param, values in request.grid.items()}
    try:
        configs = sweep_configs(name, request.base, grid, request.crosses)
    except SweepValueError as error:
        raise InvalidFieldError("grid", str(error)) from None
    for model, _ in configs:  # the key administers each model it would create
        allow(http.scope, "admin", model)
    created = await sweep(admin, configs)
    if request.promotion is not None:
        await set_policy(admin, name, request.promotion)
    catalog.forget(name)
    for model, _ in created:
        catalog.forget(model)
    models = [SweptModel(name=model, created=new) for model, new in created]
    return SweepResponse(group=name, models=models)


@router.put("/groups/{name}/promotion", responses=_errors(404, 415, 422, 503))
async def set_promotion(
    name: AdminName,
    policy: Annotated[PolicyBody, Body()],
    catalog: CatalogDep,
    admin: AdminDep,
) -> GroupDetailResponse:
    """Let a challenger replace the serving model once its progressive log loss is lower by
    ``margin`` with ``confidence`` (a sequential test on the paired losses; the docs'
    "Challengers that promote themselves" page). The tallies start afresh."""
    await set_policy(admin, name, policy)
    catalog.forget(name)
    return group_detail(await challengers(admin, name))


@router.delete("/groups/{name}/promotion", responses=_errors(404, 422, 503))
async def remove_promotion(
    name: AdminName, catalog: CatalogDep, admin: AdminDep
) -> GroupDetailResponse:
    """Only ``PUT /groups/{name}`` changes the serving model from now on."""
    await set_policy(admin, name, None)
    catalog.forget(name)
    return group_detail(await challengers(admin, name))
