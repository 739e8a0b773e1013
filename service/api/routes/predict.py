"""``POST /predict``: click probabilities with the model's weights as of now."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from pydantic_core import to_json

from service.api.deps import MODEL_PARAMETER, requested_model
from service.api.schemas import (
    PredictBatchResponse,
    PredictRequest,
    PredictResponse,
    error_responses,
)

router = APIRouter(tags=["predictions"])


@router.post(
    "/predict",
    response_model=PredictResponse | PredictBatchResponse,
    responses=error_responses(404, 408, 413, 415, 422, 503),
    openapi_extra=MODEL_PARAMETER,
)
async def predict(body: PredictRequest, request: Request) -> Response:
    """Score one example (`features`) or several (`examples`, answered in order).

    One Redis round trip reads the weights of every feature in the request.
    """
    started = time.perf_counter()
    model = requested_model(request)
    rows = body.rows()
    single = body.single
    lists = model.limits.check(rows, single)
    s, p = await model.predict(rows, lists)
    # Plain floats and a name, encoded directly: a response model's validation would cost
    # more than the encoding (``response_model`` above documents the shape).
    if single:
        answer: dict[str, object] = {"probability": p[0], "logit": s[0], "model": model.name}
    else:
        predictions = [{"probability": pi, "logit": si} for pi, si in zip(p, s, strict=True)]
        answer = {"predictions": predictions, "model": model.name}
    response = Response(to_json(answer, inf_nan_mode="null"), media_type="application/json")
    model.predict_latency.observe(time.perf_counter() - started)
    return response
