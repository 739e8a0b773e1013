"""``POST /learn``: accept labelled feedback into the model's stream; workers learn from it."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request, Response, status
from pydantic_core import to_json

from service.api.access import allow_landing
from service.api.deps import MODEL_PARAMETER, requested
from service.api.error_schemas import error_responses
from service.api.groups import ServedGroup
from service.api.join_side import join_answer
from service.api.lane import LaneRoute, ReadRequest, reads_body, validated
from service.api.learn_schemas import (
    JoinBatch,
    JoinLabel,
    LearnBatch,
    LearnExample,
    LearnRequest,
    LearnResponse,
)
from service.api.limits import InvalidFieldError
from service.api.scan import scanned_body
from service.api.served import ServedModel

IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:+/=~-]{1,255}")
#: The answer header that marks a replay of an earlier request with the same key.
REPLAYED = "Idempotent-Replayed"
_KEY_RULE = "must be 1-255 characters of A-Z a-z 0-9 and . _ : + / = ~ - (a UUID fits)"
_KEY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Makes retries safe: a request with a key used in the last OCTR_IDEMPOTENCY_WINDOW_S "
        "seconds is answered as the first one was (with `Idempotent-Replayed: true`) and "
        "appends nothing; the same key with other examples is a 409. Send a new key (e.g. a "
        f"UUID) per request and the same key on every retry of it. It {_KEY_RULE}."
    ),
    "schema": {"type": "string", "pattern": f"^{IDEMPOTENCY_KEY.pattern}$"},
}
_RESPONSES: dict[int | str, dict[str, Any]] = {
    **error_responses(404, 408, 409, 413, 415, 422, 503),
    202: {
        "description": "Accepted: the examples are in the stream (or were, for a replay).",
        "headers": {
            REPLAYED: {
                "description": "`true` when this answers a retry of an accepted request.",
                "schema": {"type": "string", "enum": ["true"]},
            }
        },
    },
}
_RESPONSES[404] = {
    **_RESPONSES[404],
    "description": "No such model here; or the one label sent by `prediction_id` is unknown.",
}
_RESPONSES[503]["description"] = (
    "Redis did not answer in time, or its replicas did not confirm the write in time "
    "(OCTR_REPLICA_ACKS). The request may still have been accepted: retry it with "
    "the same Idempotency-Key, which is always safe (without a key a retry may learn twice). "
    "Or Redis is at its memory limit (the detail says so): nothing was stored; retry later."
)


def idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key``, if it sent one; a 422 if it is malformed."""
    key = request.headers.get("idempotency-key")
    if key is not None and IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise InvalidFieldError("Idempotency-Key", _KEY_RULE)
    return key


router = APIRouter(tags=["feedback"], route_class=LaneRoute)


@router.post(
    "/learn",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=LearnResponse,
    responses=_RESPONSES,
    openapi_extra={"parameters": [*MODEL_PARAMETER["parameters"], _KEY_PARAMETER]},
)
@reads_body(LearnRequest)
async def learn(request: ReadRequest) -> Response:
    """Append one labelled example (`features` + `label`) or several (`examples`); or, with
    joins on, label served predictions by `prediction_id` (one, or `examples` of them).

    All of the request's examples go into one stream entry, and the answer is sent only after
    Redis stored it: a 202 is never lost. Learning happens in the workers, not here. A label
    by prediction id is learned with the served example if its window is still open: single,
    404 if the id is unknown, 409 if it was labelled already or came late; a batch answers
    202 with the refused ones in `rejected`.
    """
    # The one way in (service.api.lane.LaneRoute: this function gets the Request, its body
    # read).
    # A plain body, for a model within its limits, is hashed from its bytes by the compiled
    # scan: no object per feature. Any other body, and a group, is parsed and validated
    # against LearnRequest, as FastAPI would, and answered below.
    raw = request.raw
    scanned = scanned_body(request, raw, want_label=True)
    if scanned is not None:
        target = await requested(request, "learn")
        if isinstance(target, ServedModel) and scanned.within(target.limits):
            key = idempotency_key(request)
            appended = await target.append(target.learn_names.batch(raw, scanned), key)
            return _json(
                {"accepted": appended.accepted}, status.HTTP_202_ACCEPTED, appended.replayed
            )
    body: LearnExample | LearnBatch | JoinLabel | JoinBatch = await validated(request)
    model = await requested(request, "learn")
    if isinstance(model, ServedGroup):  # every model of the group learns it
        allow_landing(request.scope, "learn", model.name, model.members)
    key = idempotency_key(request)
    if isinstance(body, JoinLabel | JoinBatch):
        ids, labels = body.pairs()
        joined = await model.join(ids, labels, key)
        status_code, content = join_answer(joined, ids, body.single)
        return _json(content, status_code, joined.replayed)
    rows = body.rows()
    model.limits.check(rows, body.single)
    appended = await model.learn(rows, body.labels(), key, body.weights())
    return _json({"accepted": appended.accepted}, status.HTTP_202_ACCEPTED, appended.replayed)


def _json(content: dict[str, object], status_code: int, replayed: bool) -> Response:
    headers = {REPLAYED: "true"} if replayed else None
    return Response(
        to_json(content), status_code=status_code, media_type="application/json", headers=headers
    )
