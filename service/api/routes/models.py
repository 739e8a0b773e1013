"""The models and groups of the service: list, create, describe, delete, and choose which
model of a group serves (admin scope).

``PUT /models/{name}`` creates a model with its own rule, hyper-parameters and hashing; with a
``group`` it joins that group (created with its first model), whose feedback every model of
it learns. The service's own model (``OCTR_MODEL``) comes from the settings: it cannot be
created here, and deleting it starts it again empty.

Each operation is :class:`online_ctr.admin.ModelsAdmin`'s, as ``online-ctr models`` runs it;
a route adds only what is the API's: the answer, and dropping what its catalog knew of a name.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response, status

from online_ctr.admin import ModelsAdmin
from online_ctr.challengers import challengers
from online_ctr.learning.crosses import crosses_text
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.registry import UnknownNameError
from service.api.access import AdminName, allow, grants_of
from service.api.catalog import Catalog
from service.api.deps import CatalogDep
from service.api.error_schemas import error_responses
from service.api.groups import ServedGroup
from service.api.listing import group_detail, group_response, model_list
from service.api.model_schemas import (
    GroupDetailResponse,
    GroupResponse,
    GroupUpdate,
    ModelDeletedResponse,
    ModelInfoResponse,
    ModelListResponse,
)
from service.api.name_record import forget_names
from service.api.served import ServedModel

router = APIRouter(tags=["models"])

_MEANINGS = {
    404: "No model or group of that name.",
    409: "Refused by the registry: the message says why (a name taken, another "
    "configuration, OCTR_MAX_MODELS reached, a group's shared settings, its serving model).",
    422: "An invalid name or body; `errors` names each field.",
}


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    answers = error_responses(*statuses)
    for status_code, meaning in _MEANINGS.items():
        if status_code in answers:
            answers[status_code]["description"] = meaning
    return answers


async def get_admin(request: Request) -> ModelsAdmin:
    """The admin operations on this service's Redis, with its catalog's registry."""
    catalog: Catalog = request.app.state.catalog
    return ModelsAdmin(catalog.own.store.redis, request.app.state.settings, catalog.registry)


AdminDep = Annotated[ModelsAdmin, Depends(get_admin)]


@router.get("/models", responses=_errors(503))
async def list_models(request: Request, catalog: CatalogDep, admin: AdminDep) -> ModelListResponse:
    """Every model (its rule and group) and every group (its models and serving model) that
    the key administers."""
    configs, groups = await admin.list()
    own = catalog.own
    if own.name not in configs:  # not registered yet: Redis was down until now
        await own.ensure()
        configs, groups = await admin.list()
    grants = grants_of(request.scope)
    configs = {name: c for name, c in configs.items() if grants.allows("admin", name)}
    groups = {name: g for name, g in groups.items() if grants.allows("admin", name)}
    return model_list(configs, groups, own.name)


@router.put(
    "/models/{name}",
    status_code=status.HTTP_201_CREATED,
    responses={**_errors(409, 415, 422, 503), 200: {"description": "Existed already, alike."}},
)
async def create_model(
    name: AdminName,
    config: ModelConfig,
    request: Request,
    catalog: CatalogDep,
    admin: AdminDep,
    response: Response,
) -> ModelInfoResponse:
    """Create a model (201), or confirm one that exists with this very configuration (200).

    Another configuration under the same name is a 409: delete the model first. Models of a
    group share its feature hashing and join settings, since they learn the same feedback.
    """
    if config.group is not None:  # a model joins a group: its administrators' to allow
        allow(request.scope, "admin", config.group)
    created = await admin.create(name, config)
    catalog.forget(name)
    if config.group is not None:
        catalog.forget(config.group)
    if not created:
        response.status_code = status.HTTP_200_OK
    return await _info(await _model(catalog, name))


@router.get("/models/{name}", responses=_errors(404, 422, 503))
async def read_model(name: AdminName, catalog: CatalogDep) -> ModelInfoResponse:
    """The model's rule, hyper-parameters, global step, sizes, progressive loss and lag."""
    return await _info(await _model(catalog, name))


@router.delete("/models/{name}", responses=_errors(404, 409, 422, 503))
async def delete_model(
    name: AdminName, catalog: CatalogDep, admin: AdminDep
) -> ModelDeletedResponse:
    """Delete the model and all its keys: state, feedback not learned yet, dead letters; with
    a group's last model, the group's keys too (idempotency records, logged impressions).

    The service's own model starts again empty, with the settings this service runs with;
    its learner notices on its next commit and starts over. Any other model is gone, and
    its workers stop; the serving model of a group can only go after another was promoted.
    """
    if name == catalog.own.name:  # served by this process: emptied and created again at once
        emptied = await catalog.own.delete()
        forget_names(catalog.own)  # its record went with it: names are recorded again
        return ModelDeletedResponse(name=name, keys_deleted=emptied)
    deleted = await admin.delete(name)
    catalog.forget(name)
    if deleted.group is not None:
        catalog.forget(deleted.group)
    return ModelDeletedResponse(name=name, keys_deleted=deleted.keys)


@router.get("/groups/{name}", responses=_errors(404, 422, 503))
async def read_group(name: AdminName, admin: AdminDep) -> GroupDetailResponse:
    """The group's models, the serving one, the traffic split and, with a promotion policy,
    each challenger's standing and the last promotions."""
    return group_detail(await challengers(admin, name))


@router.put("/groups/{name}", responses=_errors(404, 409, 415, 422, 503))
async def update_group(
    name: AdminName,
    update: Annotated[GroupUpdate, Body()],
    catalog: CatalogDep,
    admin: AdminDep,
) -> GroupResponse:
    """Promote a model of the group to serving it, and set (or, absent, keep) the traffic
    split of requests that send a ``split_key``. One call; every API process follows
    within ``OCTR_REGISTRY_REFRESH_S``."""
    info = await admin.promote(name, update.serving, update.split)
    catalog.forget(name)
    return group_response(info)


async def _model(catalog: CatalogDep, name: str) -> ServedModel:
    served = await catalog.get(name, fresh=True)
    if isinstance(served, ServedGroup):
        raise UnknownNameError(f"{name!r} is a group, not a model: GET /groups/{name}")
    return served


def _rate(clicks: float, examples: float) -> float | None:
    """The base rate's click rate, unsmoothed (None before any example)."""
    return clicks / examples if examples else None


async def _info(served: ServedModel) -> ModelInfoResponse:
    info = await served.info()
    return ModelInfoResponse(
        name=info.name,
        rule=info.rule,
        params=info.params,
        hash_bits=info.hash_bits,
        global_step=info.t,
        nonzero_weights=info.nonzero_weights,
        features_tracked=info.features_tracked,
        progressive_logloss=info.progressive_logloss,
        stream_lag=info.stream_lag,
        dead_letters=info.dead_letters,
        numeric=info.numeric,
        calibration=info.calibration,
        group=served.store.spec.group,
        admission=info.admission,
        negative_rate=served.negative_rate,
        learned_weight=info.learned_weight,
        expire_after=info.expire_after,
        features_expired=info.features_expired,
        max_features=info.max_features,
        crosses=crosses_text(served.store.spec.crosses),
        features_evicted=info.features_evicted,
        features_held=info.features_held,
        features_pending_admission=info.features_pending_admission,
        base_rate=info.base_rate,
        base_rate_logit=info.base_logit,
        click_rate=_rate(info.base_clicks, info.base_examples),
        calibration_ratio=info.calibration_ratio,
        recent_calibration_ratio=info.recent_calibration_ratio,
        state_bytes=(await served.state_bytes(info.features_tracked)).total,
    )
