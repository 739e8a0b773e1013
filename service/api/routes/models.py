"""``GET /models/{name}``: what a model is and how far it has learned; ``DELETE`` removes it."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import ServedDep, not_served
from service.api.schemas import ModelDeletedResponse, ModelInfoResponse, error_responses

router = APIRouter(tags=["models"])


@router.get("/models/{name}", responses=error_responses(404, 503))
async def read_model(name: str, served: ServedDep) -> ModelInfoResponse:
    """The model's rule, hyper-parameters, global step, sizes, progressive loss and lag."""
    if name != served.name:
        raise not_served(name, served)
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
    )


@router.delete("/models/{name}", responses=error_responses(404, 503))
async def delete_model(name: str, served: ServedDep) -> ModelDeletedResponse:
    """Delete the model and all its keys: state, feedback not learned yet, dead letters.

    It starts again empty, with the settings this service runs with; the learner notices on
    its next commit and starts over on the new model.
    """
    if name != served.name:
        raise not_served(name, served)
    return ModelDeletedResponse(name=name, keys_deleted=await served.delete())
