"""``POST /learn``: accept labelled feedback into the model's stream; workers learn from it."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from service.api.deps import MODEL_PARAMETER, requested_model
from service.api.schemas import LearnRequest, LearnResponse, error_responses

router = APIRouter(tags=["feedback"])


@router.post(
    "/learn",
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(404, 413, 415, 422, 503),
    openapi_extra=MODEL_PARAMETER,
)
async def learn(body: LearnRequest, request: Request) -> LearnResponse:
    """Append one labelled example (`features` + `label`) or several (`examples`).

    All of the request's examples go into one stream entry, and the answer is sent only after
    Redis stored it: a 202 is never lost. Learning happens in the workers, not here.
    """
    model = requested_model(request)
    rows = body.rows()
    model.limits.check(rows, body.features is not None)
    accepted = await model.learn(rows, body.labels())
    return LearnResponse(accepted=accepted)
