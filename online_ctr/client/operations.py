"""Each client call as data: the HTTP requests it needs, and which :mod:`answers` parser
reads each answer and combines the parts into the call's result.

:class:`Client` and :class:`AsyncClient` only send the :class:`Call` objects an
:class:`Operation` lists (each with the retry policy) and hand the answers back, so both share
everything here. A new endpoint is one more function returning an :class:`Operation`, and one
line in each client.

Model snapshots (export and import) are not operations: their bodies are streamed, never
held whole, so the clients send them themselves (:mod:`online_ctr.client.snapshots`).

Not built yet: labelling served predictions by ``prediction_id``. The service has it (``POST
/learn`` with ``{"prediction_id": ..., "label": ...}`` or ``examples`` of them, for a model with
``OCTR_JOIN_WINDOW_S`` > 0; see docs/concepts/joins.md); this client does not
send it yet. It goes here, as one more function returning an :class:`Operation`."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar
from urllib.parse import quote

import httpx

from online_ctr.client import answers
from online_ctr.client.errors import InvalidExampleError
from online_ctr.client.results import Accepted, FeatureMap, ModelDeleted, ModelInfo, Prediction

#: The service's default ``OCTR_MAX_EXAMPLES_PER_REQUEST``.
MAX_BATCH = 1000
#: The request header that makes a ``/learn`` retry safe.
IDEMPOTENCY_KEY = "Idempotency-Key"

Part = TypeVar("Part")
Result = TypeVar("Result")
#: ``(features, label)``, or ``(features, label, weight)`` with an importance weight.
LabelledExample = tuple[FeatureMap, int] | tuple[FeatureMap, int, float]


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


def predict(
    features: FeatureMap, model: str | None, explain: int | None = None, uncertainty: bool = False
) -> Operation[list[Prediction], Prediction]:
    """``POST /predict`` for one example; with ``explain`` (a count of terms), its logit
    explained; with ``uncertainty``, its uncertainty."""
    body = {"features": dict(features), **_explain(explain), **_uncertainty(uncertainty)}
    return Operation(
        [Call("POST", "/predict", body, {}, _model(model), 1)],
        answers.one_prediction,
        answers.single,
    )


def predict_many(
    rows: Iterable[FeatureMap],
    model: str | None,
    max_batch: int,
    explain: int | None = None,
    uncertainty: bool = False,
) -> Operation[list[Prediction], list[Prediction]]:
    """``POST /predict`` for many examples, ``max_batch`` per request, answers in order;
    with ``explain`` (a count of terms), their logits explained; with ``uncertainty``,
    their uncertainties."""
    options = {**_explain(explain), **_uncertainty(uncertainty)}
    calls = (
        Call(
            "POST",
            "/predict",
            {"examples": [{"features": dict(x)} for x in batch], **options},
            {},
            _model(model),
            len(batch),
        )
        for batch in batches(rows, max_batch)
    )
    return Operation(calls, answers.predictions, answers.flat)


def _explain(top: int | None) -> dict[str, object]:
    """The body's explain keys: none unless asked for (the service's default top is 10)."""
    return {} if top is None else {"explain": True, "explain_top": top}


def _uncertainty(asked: bool) -> dict[str, object]:
    """The body's uncertainty key: none unless asked for (the service's default is false)."""
    return {"uncertainty": True} if asked else {}


def learn(
    features: FeatureMap,
    label: int,
    model: str | None,
    key: str | None,
    weight: float | None = None,
) -> Operation[Accepted, Accepted]:
    """``POST /learn`` for one example (of importance ``weight``, if given), with ``key`` or a
    new ``Idempotency-Key``."""
    headers = {IDEMPOTENCY_KEY: key} if key else _new_key()
    example = (features, label) if weight is None else (features, label, weight)
    body = _labelled(example, "")
    return Operation(
        [Call("POST", "/learn", body, headers, _model(model), 1)], answers.accepted, answers.total
    )


def learn_many(
    examples: Iterable[LabelledExample], model: str | None, max_batch: int
) -> Operation[Accepted, Accepted]:
    """``POST /learn`` for many examples, ``max_batch`` per request, each request with an
    ``Idempotency-Key`` of its own (made when the request is, and kept for its retries)."""
    calls = (
        Call(
            "POST",
            "/learn",
            {"examples": [_labelled(example, f"examples[{n}].") for n, example in batch]},
            _new_key(),
            _model(model),
            len(batch),
        )
        for batch in batches(enumerate(examples), max_batch)
    )
    return Operation(calls, answers.accepted, answers.total)


def _labelled(example: LabelledExample, where: str) -> dict[str, object]:
    """One example of a ``/learn`` body: its features, label and weight, if it has one; an
    :class:`InvalidExampleError` naming the field (after ``where``) for a label that is not 0
    or 1 or a weight that is not a finite number, which ``int()``, ``float()`` or the JSON
    encoder would change or refuse with a bare ``ValueError``.

    >>> try:
    ...     _labelled(({"a": "b"}, "yes"), "examples[3].")
    ... except InvalidExampleError as error:
    ...     print(error.errors)
    (('examples[3].label', "0 (not clicked) or 1 (clicked), not 'yes'"),)
    >>> _labelled(({"a": "b"}, 1.0, 2), "")
    {'features': {'a': 'b'}, 'label': 1, 'weight': 2.0}
    """
    label = example[1]
    if not isinstance(label, int | float) or label not in (0, 1):
        raise InvalidExampleError(f"{where}label", f"0 (not clicked) or 1 (clicked), not {label!r}")
    body: dict[str, object] = {"features": dict(example[0]), "label": int(label)}
    if len(example) == 3:
        weight = example[2]
        # JSON has no nan or inf: encoding one would be a bare ValueError.
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise InvalidExampleError(f"{where}weight", f"a finite number, not {weight!r}")
        if not math.isfinite(weight):
            raise InvalidExampleError(f"{where}weight", f"a finite number, not {weight!r}")
        body["weight"] = float(weight)
    return body


def model_info(name: str) -> Operation[ModelInfo, ModelInfo]:
    """``GET /models/{name}``."""
    return Operation(
        [Call("GET", f"/models/{quote(name, safe='')}")], answers.model_info, answers.first
    )


def delete_model(name: str) -> Operation[ModelDeleted, ModelDeleted]:
    """``DELETE /models/{name}``."""
    return Operation(
        [Call("DELETE", f"/models/{quote(name, safe='')}")], answers.deleted, answers.first
    )


def headers(api_key: str | None) -> dict[str, str]:
    """The headers every request of a client carries."""
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return {"User-Agent": "online-ctr-client", "Accept": "application/json", **auth}
