"""``POST /predict``: click probabilities with the model's weights as of now."""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request, Response

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
    responses=error_responses(404, 413, 415, 422, 503),
    openapi_extra=MODEL_PARAMETER,
)
async def predict(body: PredictRequest, request: Request) -> Response:
    """Score one example (`features`) or several (`examples`, answered in order).

    One Redis round trip reads the weights of every feature in the request.
    """
    started = time.perf_counter()
    model = requested_model(request)
    rows = body.rows()
    single = body.features is not None
    model.limits.check(rows, single)
    s, p = await model.predict(rows)
    model.predictions.inc(len(rows))
    # The answer is plain floats and a name: encoded directly rather than through a response
    # model, whose validation would cost more than the encoding (response_model documents it).
    if single:
        answer: dict[str, object] = {
            "probability": float(p[0]),
            "logit": float(s[0]),
            "model": model.name,
        }
    else:
        answer = {
            "predictions": [
                {"probability": probability, "logit": logit}
                for probability, logit in zip(p.tolist(), s.tolist(), strict=True)
            ],
            "model": model.name,
        }
    response = Response(json.dumps(answer, allow_nan=False), media_type="application/json")
    model.predict_latency.observe(time.perf_counter() - started)
    return response
