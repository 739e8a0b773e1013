"""``GET /models/{name}/weights``: a model's largest weights with their feature names, or one
feature's weight and state by name (admin scope, as every ``/models`` path).

The names come from the model's record of them (:mod:`online_ctr.store.feature_names`),
which only a model created with ``feature_names`` keeps; the weights from a scan of its
state (:mod:`online_ctr.store.weights`), as ``online-ctr models weights`` reads them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from online_ctr.store.weights import MAX_TOP, WeightsReader, names_off
from service.api.access import AdminName
from service.api.deps import CatalogDep
from service.api.name_record import recorder_of
from service.api.routes.models import _errors, _model
from service.api.weights_schemas import WeightsResponse, weights_response

router = APIRouter(tags=["models"])


_ANSWERS = _errors(404, 409, 422, 503)
_ANSWERS[404]["description"] = (
    "No model of that name, or no weight for `feature` (as a category, nor as a number)."
)
_ANSWERS[409]["description"] = (
    "The model records no feature names (the message says how to turn it on): only "
    "`feature` can be looked up."
)


@router.get("/models/{name}/weights", responses=_ANSWERS)
async def read_weights(
    name: AdminName,
    catalog: CatalogDep,
    top: Annotated[
        int, Query(ge=1, le=MAX_TOP, description="How many of the largest |w| to list.")
    ] = 20,
    feature: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=1281,
            description="One feature to look up instead, as sent: `field=value`. A number "
            "(`hour=20`) is also looked up as the feature it becomes (log_bucket mode: its "
            "bucket, `hour=8`; raw mode: `hour`); the answer lists each one stored.",
        ),
    ] = None,
) -> WeightsResponse:
    """The model's `top` features of largest |w| (ties: smaller id first), each with its
    recorded name, weight and state as the rule keeps it; or, with `feature`, that one.

    Listing reads every stored feature (as a snapshot export does: a few seconds per million
    features) and needs the model to record its feature names; a lookup reads one feature.
    """
    served = await _model(catalog, name)
    await served.ensure()
    recorder = recorder_of(served)
    record = None
    if recorder is not None:
        await recorder.flush()  # the names this process has hashed are in the answer
        record = recorder.record
    reader = WeightsReader(served.store, record)
    if feature is not None:
        return weights_response(await reader.lookup(feature))
    if record is None:
        raise names_off(name, own=name == catalog.own.name)
    return weights_response(await reader.top(top))
