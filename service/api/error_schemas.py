"""What every error answers, and the error rows of each route's OpenAPI ``responses``."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
)


class FieldError(BaseModel):
    """One invalid part of a request."""

    field: str = Field(examples=["examples[2].features.price"])
    message: str = Field(examples=["must be a finite number, not NaN or Infinity"])


class ErrorResponse(BaseModel):
    """What every error answers; ``errors`` lists the invalid fields of a 422."""

    detail: str
    errors: list[FieldError] | None = None


#: What each error status means, for the OpenAPI document.
ERROR_MEANINGS = {
    404: "No such model here.",
    408: "The body did not arrive within OCTR_BODY_TIMEOUT_S (e.g. shorter than its "
    "Content-Length).",
    409: "The Idempotency-Key was used for other examples; or (joins) a prediction_id "
    "already used for a prediction or twice in one batch, or a label repeated or too late.",
    413: "The body is larger than OCTR_MAX_BODY_BYTES.",
    415: "The body is not declared JSON, or has a Content-Encoding (send it uncompressed).",
    422: "Invalid request: not UTF-8, not JSON, nested too deeply, a lone surrogate, not "
    "exactly one of `features` and `examples`, or a field out of bounds; `errors` names each. "
    "A key repeated in one JSON object is not refused: its last value counts.",
    503: "Redis is unavailable; retry after Retry-After seconds.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error statuses."""
    return {
        status: {"model": ErrorResponse, "description": ERROR_MEANINGS[status]}
        for status in statuses
    }
