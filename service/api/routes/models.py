"""The models and groups of the service: list, create, describe, delete, and choose which
model of a group serves (admin scope).

``PUT /models/{name}`` creates a model with its own rule, hyper-parameters and hashing; with a
``group`` it joins that group (created with its first model), whose feedback every model of
it learns. The service's own model (``OCTR_MODEL``) comes from the settings: it cannot be
created here, and deleting it starts it again empty.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Response, status

from online_ctr.store.keys import MODEL_NAME
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.registry import RegistryError, UnknownNameError
from online_ctr.store.state import ModelMismatchError, ModelStore
from service.api.deps import CatalogDep
from service.api.groups import ServedGroup
from service.api.listing import group_response, model_list
from service.api.schemas import (
    GroupResponse,
    GroupUpdate,
    ModelDeletedResponse,
    ModelInfoResponse,
    ModelListResponse,
    error_responses,
)
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


Name = Annotated[
    str,
    Path(
        pattern=MODEL_NAME.pattern,
        description="1-64 of A-Z a-z 0-9 _ . - (first a letter or digit).",
    ),
]


@router.get("/models", responses=_errors(503))
async def list_models(catalog: CatalogDep) -> ModelListResponse:
    """Every model (its rule and group) and every group (its models and serving model)."""
    configs = await catalog.registry.models()
    groups = await catalog.registry.groups()
    own = catalog.own
    if own.name not in configs:  # not registered yet: Redis was down until now
        await own.ensure()
        configs = await catalog.registry.models()
    return model_list(configs, groups, own.name)


@router.put(
    "/models/{name}",
    status_code=status.HTTP_201_CREATED,
    responses={**_errors(409, 415, 422, 503), 200: {"description": "Existed already, alike."}},
)
async def create_model(
    name: Name, config: ModelConfig, catalog: CatalogDep, response: Response
) -> ModelInfoResponse:
    """Create a model (201), or confirm one that exists with this very configuration (200).

    Another configuration under the same name is a 409: delete the model first. Models of a
    group share its feature hashing and join settings, since they learn the same feedback.
    """
    if name == catalog.own.name:
        raise RegistryError(
            f"{name!r} is this service's own model (OCTR_MODEL), configured by its settings"
        )
    created = await catalog.registry.create(name, config)
    store = ModelStore(catalog.own.store.redis, config.spec(name))
    try:
        await store.ensure()
    except ModelMismatchError as error:
        if created:  # keys of an unregistered model of that name (an old import, say)
            await catalog.registry.delete(name)
        raise RegistryError(str(error)) from None
    catalog.forget(name)
    if config.group is not None:
        catalog.forget(config.group)
    if not created:
        response.status_code = status.HTTP_200_OK
    return await _info(await _model(catalog, name))


@router.get("/models/{name}", responses=_errors(404, 422, 503))
async def read_model(name: Name, catalog: CatalogDep) -> ModelInfoResponse:
    """The model's rule, hyper-parameters, global step, sizes, progressive loss and lag."""
    return await _info(await _model(catalog, name))


@router.delete("/models/{name}", responses=_errors(404, 409, 422, 503))
async def delete_model(name: Name, catalog: CatalogDep) -> ModelDeletedResponse:
    """Delete the model and all its keys: state, feedback not learned yet, dead letters.

    The service's own model starts again empty, with the settings this service runs with;
    its learner notices on its next commit and starts over. Any other model is gone, and
    its workers stop; the serving model of a group can only go after another was promoted.
    """
    if name == catalog.own.name:
        return ModelDeletedResponse(name=name, keys_deleted=await catalog.own.delete())
    if isinstance(await catalog.get(name, fresh=True), ServedGroup):
        raise UnknownNameError(f"{name!r} is a group: delete its models (the last one ends it)")
    config = await catalog.registry.delete(name)
    redis = catalog.own.store.redis
    deleted = await ModelStore(redis, config.spec(name)).delete()
    catalog.forget(name)
    if config.group is not None:
        catalog.forget(config.group)
        if await catalog.registry.lookup(config.group) is None:  # its last model: it ends
            deleted += await _delete_matching(redis, f"octr:{{g:{config.group}}}:*")
    return ModelDeletedResponse(name=name, keys_deleted=deleted)


async def _delete_matching(redis: Any, pattern: str) -> int:
    """Delete the keys matching ``pattern`` (one hash tag: a group's impressions, pending
    set and idempotency records), one UNLINK per key."""
    keys = [key async for key in redis.scan_iter(match=pattern, count=1000)]
    for key in keys:
        await redis.unlink(key)
    return len(keys)


@router.get("/groups/{name}", responses=_errors(404, 422, 503))
async def read_group(name: Name, catalog: CatalogDep) -> GroupResponse:
    """The group's models, the serving one and the traffic split."""
    return group_response((await _group_of(catalog, name)).info)


@router.put("/groups/{name}", responses=_errors(404, 409, 415, 422, 503))
async def update_group(
    name: Name, update: Annotated[GroupUpdate, Body()], catalog: CatalogDep
) -> GroupResponse:
    """Promote a model of the group to serving it, and set (or, absent, keep) the traffic
    split of requests that send a ``split_key``. One call; every API process follows
    within ``OCTR_REGISTRY_REFRESH_S``."""
    split = update.split
    if split is None:
        split = (await _group_of(catalog, name)).info.split
    info = await catalog.registry.serve(name, update.serving, split)
    catalog.forget(name)
    return group_response(info)


async def _model(catalog: CatalogDep, name: str) -> ServedModel:
    served = await catalog.get(name, fresh=True)
    if isinstance(served, ServedGroup):
        raise UnknownNameError(f"{name!r} is a group, not a model: GET /groups/{name}")
    return served


async def _group_of(catalog: CatalogDep, name: str) -> ServedGroup:
    served = await catalog.get(name, fresh=True)
    if not isinstance(served, ServedGroup):
        raise UnknownNameError(f"{name!r} is a model, not a group: GET /models/{name}")
    return served


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
    )
