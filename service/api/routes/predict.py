"""``POST /predict``: click probabilities with the model's weights as of now."""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Response

from online_ctr.learning.explain import Explanation
from service.api.access import allow_landing
from service.api.deps import MODEL_PARAMETER, requested
from service.api.error_schemas import error_responses
from service.api.groups import ServedGroup
from service.api.join_side import PredictionIdUsedError, used_error
from service.api.lane import LaneRoute, ReadRequest, reads_body, validated
from service.api.predict_schemas import (
    PredictBatch,
    PredictBatchResponse,
    PredictExample,
    PredictRequest,
    PredictResponse,
)
from service.api.scan import scanned_body
from service.api.served import Scores, ServedModel

router = APIRouter(tags=["predictions"], route_class=LaneRoute)


@router.post(
    "/predict",
    response_model=PredictResponse | PredictBatchResponse,
    responses=error_responses(404, 408, 409, 413, 415, 422, 503),
    openapi_extra=MODEL_PARAMETER,
)
@reads_body(PredictRequest)
async def predict(request: ReadRequest) -> Response:
    """Score one example (`features`) or several (`examples`, answered in order).

    One Redis round trip reads the weights of every feature in the request (and, with
    `uncertainty: true`, their step sizes and nothing more). With joins on, every answer
    carries a `prediction_id` (the caller's, or a new one), logged before the answer is sent:
    send it to /learn with the label when the click comes. At the bound of impressions
    waiting for labels (OCTR_MAX_PENDING_IMPRESSIONS), or with Redis at its memory limit, the
    request is still scored but not logged (whole requests, the first that fit logged): its
    `prediction_id`s are null. With `explain: true`, each answer carries its `explanation`: the
    bias and the `explain_top` largest contributions weight * x to its logit (before any
    calibration), and the sum of the others: computed from the weights read for the score, with
    no Redis command more.
    """
    # The one way in (service.api.lane.LaneRoute: this function gets the Request, its body
    # read).
    # A plain body, for a model within its limits, is scored from its bytes: the compiled
    # scan finds its names, and no object is made per feature. Any other body, and a group,
    # is parsed and validated against PredictRequest, as FastAPI would, and answered below.
    started = time.perf_counter()
    raw = request.raw
    scanned = scanned_body(request, raw, want_label=False)
    if scanned is not None:
        target = await requested(request, "predict")
        if isinstance(target, ServedModel) and scanned.within(target.limits):
            scores = await target.predict_hashed(target.names.batch(raw, scanned))
            return answer(target, scores, scanned.single, started)
    body: PredictExample | PredictBatch = await validated(request)
    target = await requested(request, "predict")
    if isinstance(target, ServedGroup):  # checked where its split lands
        model = target.pick(body.split_key)
        allow_landing(request.scope, "predict", target.name, [model.name])
    else:
        model = target
    rows = body.rows()
    single = body.single
    lists = model.limits.check(rows, single)
    ids = body.ids()
    model.joins.check(ids)  # ids without joins: a 422 that says how to turn them on
    refuse_repeated(ids)
    # With explain, each logit in parts, from the weights this pass reads anyway.
    top = body.explain_top if body.explain else 0
    scores = await model.predict(rows, lists, body.uncertainty, ids, top)
    return answer(model, scores, single, started)


def refuse_repeated(ids: list[str | None] | None) -> None:
    """A 409 for a batch that gives two examples one prediction id, as for an id an earlier
    request used: one impression per id. Not a 422, which would say the body breaks its
    schema, when JSON Schema cannot say that ids in an array of objects are distinct."""
    first: dict[str, int] = {}
    repeated: list[str] = []
    for index, prediction_id in enumerate(ids or ()):
        if prediction_id is None:
            continue
        if prediction_id in first:
            repeated.append(
                f"examples[{index}] {prediction_id!r} (as examples[{first[prediction_id]}])"
            )
        else:
            first[prediction_id] = index
    if repeated:
        raise PredictionIdUsedError(
            f"prediction_ids repeated in this request: {', '.join(repeated)}; use a new id per "
            "impression (nothing of this request was logged)"
        )


def answer(model: ServedModel, scores: Scores, single: bool, started: float) -> Response:
    """The answer of a request that ``model`` scored, and its latency observed."""
    if scores.used:
        raise used_error(scores.used, single)
    # Plain floats and a name, encoded directly: a response model's validation would cost
    # more than the encoding (``response_model`` above documents the shape). orjson writes
    # the bytes pydantic's to_json did (shortest floats, NaN and infinities as null) in 64%
    # of its time for 1,000 predictions.
    predictions = _predictions(scores)
    content: dict[str, object] = predictions[0] if single else {"predictions": predictions}
    content.update(model=model.name, calibrated=scores.calibrated)
    response = Response(orjson.dumps(content), media_type="application/json")
    model.predict_latency.observe(time.perf_counter() - started)
    return response


def _predictions(scores: Scores) -> list[dict[str, object]]:
    """Per example its probability and logit, and its uncertainty and explanation if asked
    for."""
    pairs = zip(scores.probabilities, scores.logits, strict=True)
    answers: list[dict[str, object]] = [{"probability": p, "logit": s} for p, s in pairs]
    if scores.uncertainties is not None:
        for answer, u in zip(answers, scores.uncertainties, strict=True):
            answer["uncertainty"] = u
    if scores.explanations is not None:
        for answer, explanation in zip(answers, scores.explanations, strict=True):
            answer["explanation"] = _explained(explanation)
    if scores.prediction_ids is not None:  # None for one not logged: JSON null
        for answer, prediction_id in zip(answers, scores.prediction_ids, strict=True):
            answer["prediction_id"] = prediction_id
    return answers


def _explained(explanation: Explanation) -> dict[str, object]:
    """An explanation as predict_schemas.Explanation documents it (``number`` only for a number)."""
    terms: list[dict[str, object]] = []
    for t in explanation.terms:
        term: dict[str, object] = {"feature": t.name}
        if t.number is not None:
            term["number"] = t.number
        term.update(x=t.x, weight=t.weight, contribution=t.contribution)
        terms.append(term)
    return {
        "bias": explanation.bias,
        "base_rate": explanation.base_rate,
        "features": terms,
        "rest": explanation.rest,
        "omitted": explanation.omitted,
    }
