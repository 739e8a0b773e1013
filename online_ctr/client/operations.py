"""Each client call as data: the HTTP requests it needs and how their answers become results.

:class:`Client` and :class:`AsyncClient` only send the :class:`Call` objects an
:class:`Operation` lists (each with the retry policy) and hand the answers back, so both share
everything here. A new endpoint is one more function returning an :class:`Operation`, and one
line in each client; that is where learning by prediction id and model snapshots (export and
import) will go once the service has them (issue 12, items 1 and 2): they do not exist yet.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from online_ctr.client.errors import ApiError, ClientError, OnlineCtrError, ServerError
from online_ctr.client.results import Accepted, Features, ModelDeleted, ModelInfo, Prediction

#: The service's default ``OCTR_MAX_EXAMPLES_PER_REQUEST``.
MAX_BATCH = 1000
#: The request header that makes a ``/learn`` retry safe, and the answer's replay marker.
IDEMPOTENCY_KEY, REPLAYED = "Idempotency-Key", "idempotent-replayed"

Part = TypeVar("Part")
Result = TypeVar("Result")
Example = tuple[Features, int]


@dataclass(frozen=True)
class Call:
    """One HTTP request, built afresh for every attempt from the same parts (so a retry
    sends the same ``Idempotency-Key``); ``examples`` is how many examples it carries."""

    method: str
    path: str
    body: object = None
    headers: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    examples: int = 0

    def request(self, http: httpx.Client | httpx.AsyncClient, timeout_s: float) -> httpx.Request:
        """The request for one attempt, with that attempt's timeout."""
        return http.build_request(
            self.method,
            self.path,
            json=self.body,
            headers=self.headers,
            params=self.params,
            timeout=timeout_s,
        )


@dataclass(frozen=True)
class Operation(Generic[Part, Result]):
    """Calls to send in order, what each successful answer means, and how the parts combine."""

    calls: Iterable[Call]
    parse: Callable[[httpx.Response], Part]
    combine: Callable[[list[Part]], Result]


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
    return Prediction(float(item["probability"]), float(item["logit"]), model)


@_parser
def _one_prediction(body: dict[str, Any], _: httpx.Response) -> list[Prediction]:
    return [_prediction(body, str(body["model"]))]


@_parser
def _predictions(body: dict[str, Any], _: httpx.Response) -> list[Prediction]:
    return [_prediction(item, str(body["model"])) for item in body["predictions"]]


@_parser
def _accepted(body: dict[str, Any], response: httpx.Response) -> Accepted:
    return Accepted(int(body["accepted"]), response.headers.get(REPLAYED) == "true")


@_parser
def _model_info(body: dict[str, Any], _: httpx.Response) -> ModelInfo:
    loss = body.get("progressive_logloss")
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
    )


@_parser
def _deleted(body: dict[str, Any], _: httpx.Response) -> ModelDeleted:
    return ModelDeleted(str(body["name"]), int(body["keys_deleted"]))


def _first(parts: list[Part]) -> Part:
    return parts[0]


def _single(parts: list[list[Prediction]]) -> Prediction:
    return parts[0][0]


def _flat(parts: list[list[Prediction]]) -> list[Prediction]:
    return [prediction for part in parts for prediction in part]


def _sum(parts: list[Accepted]) -> Accepted:
    return Accepted(sum(p.accepted for p in parts), any(p.replayed for p in parts))


def batches(items: Iterable[Part], size: int) -> Iterator[list[Part]]:
    """``items`` in consecutive lists of at most ``size``, read lazily.

    >>> list(batches(range(5), 2))
    [[0, 1], [2, 3], [4]]
    """
    if size < 1:
        raise ValueError(f"the batch size must be at least 1, not {size}")
    batch: list[Part] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _model(model: str | None) -> dict[str, str]:
    return {"model": model} if model else {}


def _new_key() -> dict[str, str]:
    return {IDEMPOTENCY_KEY: uuid.uuid4().hex}


def predict(features: Features, model: str | None) -> Operation[list[Prediction], Prediction]:
    """``POST /predict`` for one example."""
    body = {"features": dict(features)}
    return Operation(
        [Call("POST", "/predict", body, {}, _model(model), 1)], _one_prediction, _single
    )


def predict_many(
    rows: Iterable[Features], model: str | None, max_batch: int
) -> Operation[list[Prediction], list[Prediction]]:
    """``POST /predict`` for many examples, ``max_batch`` per request, answers in order."""
    calls = (
        Call(
            "POST",
            "/predict",
            {"examples": [{"features": dict(x)} for x in batch]},
            {},
            _model(model),
            len(batch),
        )
        for batch in batches(rows, max_batch)
    )
    return Operation(calls, _predictions, _flat)


def learn(
    features: Features, label: int, model: str | None, key: str | None
) -> Operation[Accepted, Accepted]:
    """``POST /learn`` for one example, with ``key`` or a new ``Idempotency-Key``."""
    headers = {IDEMPOTENCY_KEY: key} if key else _new_key()
    body = {"features": dict(features), "label": int(label)}
    return Operation([Call("POST", "/learn", body, headers, _model(model), 1)], _accepted, _sum)


def learn_many(
    examples: Iterable[Example], model: str | None, max_batch: int
) -> Operation[Accepted, Accepted]:
    """``POST /learn`` for many examples, ``max_batch`` per request, each request with an
    ``Idempotency-Key`` of its own (made when the request is, and kept for its retries)."""
    calls = (
        Call(
            "POST",
            "/learn",
            {"examples": [{"features": dict(x), "label": int(y)} for x, y in batch]},
            _new_key(),
            _model(model),
            len(batch),
        )
        for batch in batches(examples, max_batch)
    )
    return Operation(calls, _accepted, _sum)


def model_info(name: str) -> Operation[ModelInfo, ModelInfo]:
    """``GET /models/{name}``."""
    return Operation([Call("GET", f"/models/{quote(name, safe='')}")], _model_info, _first)


def delete_model(name: str) -> Operation[ModelDeleted, ModelDeleted]:
    """``DELETE /models/{name}``."""
    return Operation([Call("DELETE", f"/models/{quote(name, safe='')}")], _deleted, _first)


def headers(api_key: str | None) -> dict[str, str]:
    """The headers every request of a client carries."""
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return {"User-Agent": "online-ctr-client", "Accept": "application/json", **auth}
