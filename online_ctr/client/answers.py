"""What the service's answers mean: its errors, typed by status, and its bodies, as results.

Every parser checks the status first (:func:`check`), then reads the JSON object; an answer
of the wrong shape (a proxy's error page, another service) is a clear :class:`OnlineCtrError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from online_ctr.client.errors import ApiError, ClientError, OnlineCtrError, ServerError
from online_ctr.client.results import (
    Accepted,
    Explanation,
    ModelDeleted,
    ModelImported,
    ModelInfo,
    Prediction,
    Term,
)

Part = TypeVar("Part")
#: The answer header that marks a replay of an earlier ``/learn`` with the same key.
REPLAYED = "idempotent-replayed"


def check(response: httpx.Response) -> httpx.Response:
    """The response if it is a success; the service's error, typed by its status, if not."""
    status = response.status_code
    if 200 <= status < 300:
        return response
    message = response.reason_phrase or "error"
    errors: tuple[tuple[str, str], ...] = ()
    try:
        body = response.json()
        message = str(body["detail"])
        errors = tuple((str(e["field"]), str(e["message"])) for e in body.get("errors") or ())
    except (ValueError, KeyError, TypeError, AttributeError):
        message = response.text.strip()[:500] or message
    kind = ClientError if 400 <= status < 500 else ServerError if status >= 500 else ApiError
    raise kind(status, message, errors)


def _body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as error:
        raise OnlineCtrError(f"the service answered {response.status_code} without JSON") from error
    if not isinstance(body, dict):
        raise OnlineCtrError(f"the service answered {type(body).__name__}, not an object")
    return body


def _parser(
    build: Callable[[dict[str, Any], httpx.Response], Part],
) -> Callable[[httpx.Response], Part]:
    """``build`` applied to the JSON object of a checked response; a clear error if it does
    not have the expected shape (a proxy's page, another service)."""

    def parse(response: httpx.Response) -> Part:
        body = _body(check(response))
        try:
            return build(body, response)
        except (KeyError, TypeError, ValueError) as error:
            shown = str(body)[:300]
            raise OnlineCtrError(f"unexpected answer from {response.url.path}: {shown}") from error

    return parse


def _prediction(item: dict[str, Any], model: str) -> Prediction:
    explained = item.get("explanation")
    explanation = None if explained is None else _explanation(explained)
    uncertainty = _optional(item.get("uncertainty"))
    return Prediction(
        float(item["probability"]), float(item["logit"]), model, explanation, uncertainty
    )


def _explanation(body: dict[str, Any]) -> Explanation:
    terms = tuple(
        Term(
            str(t["feature"]),
            float(t["x"]),
            float(t["weight"]),
            float(t["contribution"]),
            None if t.get("number") is None else float(t["number"]),
        )
        for t in body["features"]
    )
    prior = float(body.get("base_rate", 0.0))  # 0 from a server older than the prior
    return Explanation(float(body["bias"]), terms, float(body["rest"]), int(body["omitted"]), prior)


@_parser
def one_prediction(body: dict[str, Any], _: httpx.Response) -> list[Prediction]:
    return [_prediction(body, str(body["model"]))]


@_parser
def predictions(body: dict[str, Any], _: httpx.Response) -> list[Prediction]:
    return [_prediction(item, str(body["model"])) for item in body["predictions"]]


@_parser
def accepted(body: dict[str, Any], response: httpx.Response) -> Accepted:
    return Accepted(int(body["accepted"]), response.headers.get(REPLAYED) == "true")


@_parser
def model_info(body: dict[str, Any], _: httpx.Response) -> ModelInfo:
    loss, pending = body.get("progressive_logloss"), body.get("features_pending_admission")
    return ModelInfo(
        name=str(body["name"]),
        rule=str(body["rule"]),
        params={str(k): float(v) for k, v in body["params"].items()},
        hash_bits=int(body["hash_bits"]),
        global_step=int(body["global_step"]),
        nonzero_weights=int(body["nonzero_weights"]),
        features_tracked=int(body["features_tracked"]),
        progressive_logloss=None if loss is None else float(loss),
        stream_lag=int(body["stream_lag"]),
        dead_letters=int(body["dead_letters"]),
        # Absent from a service older than lean models: what it did.
        admission=str(body.get("admission", "all")),
        negative_rate=float(body.get("negative_rate", 1.0)),
        learned_weight=float(body.get("learned_weight", body["global_step"])),
        expire_after=int(body.get("expire_after", 0)),
        features_expired=int(body.get("features_expired", 0)),
        max_features=int(body.get("max_features", 0)),
        features_evicted=int(body.get("features_evicted", 0)),
        features_held=int(body.get("features_held", body["features_tracked"])),
        features_pending_admission=None if pending is None else int(pending),
        state_bytes=int(body.get("state_bytes", 0)),
        base_rate=str(body.get("base_rate", "off")),
        base_rate_logit=float(body.get("base_rate_logit", 0.0)),
        click_rate=_optional(body.get("click_rate")),
        calibration_ratio=_optional(body.get("calibration_ratio")),
        recent_calibration_ratio=_optional(body.get("recent_calibration_ratio")),
    )


def _optional(value: Any) -> float | None:
    """A number the service may send as null."""
    return None if value is None else float(value)


@_parser
def deleted(body: dict[str, Any], _: httpx.Response) -> ModelDeleted:
    return ModelDeleted(str(body["name"]), int(body["keys_deleted"]))


@_parser
def imported(body: dict[str, Any], _: httpx.Response) -> ModelImported:
    return ModelImported(
        name=str(body["name"]),
        rule=str(body["rule"]),
        global_step=int(body["global_step"]),
        features_tracked=int(body["features_tracked"]),
        nonzero_weights=int(body["nonzero_weights"]),
        rows=int(body["rows"]),
    )


def first(parts: list[Part]) -> Part:
    return parts[0]


def single(parts: list[list[Prediction]]) -> Prediction:
    return parts[0][0]


def flat(parts: list[list[Prediction]]) -> list[Prediction]:
    return [prediction for part in parts for prediction in part]


def total(parts: list[Accepted]) -> Accepted:
    return Accepted(sum(p.accepted for p in parts), any(p.replayed for p in parts))
