"""The route class of ``POST /predict`` and ``POST /learn``: the endpoint takes the
``Request`` and reads its body itself, so that the compiled scan is a step inside it.

A single ``/predict`` is small, so what the framework does around it is most of its cost:
dependency injection, the route's request and exception wrappers and exit stacks, and
validating the body with pydantic cost about a fifth of the API's CPU per single request
(cProfile of the app driven in-process). Each endpoint therefore reads the body itself: a body
:mod:`service.api.scan` reads is answered from its bytes, and any other is parsed and
validated by :func:`validated` exactly as FastAPI would have (same field, same errors).

:class:`LaneRoute` calls the endpoint with the ``Request`` alone; errors go to the
application's exception handlers as any route's do. The body's model, named by
:func:`reads_body` above the endpoint, is the route's ``body_field``: FastAPI's OpenAPI
document describes the request body from it, as for a route that takes the model.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from fastapi import Request, Response
from fastapi._compat import ModelField
from fastapi.dependencies.utils import get_dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send

from service.api.errors import declares_json, not_json_error
from service.api.limits import InvalidFieldError
from service.api.messages import unparseable_body

Endpoint = Callable[[Request], Awaitable[Response]]
E = TypeVar("E", bound=Endpoint)
#: Where :func:`reads_body` leaves the body's declared type on the endpoint.
_BODY = "__body_model__"


def reads_body(declared: Any) -> Callable[[E], E]:
    """Declare the body an endpoint of a :class:`LaneRoute` reads: ``declared`` (a pydantic
    model or an annotated union of them) is what :func:`validated` parses a body into and
    what the OpenAPI document says the body is."""

    def declare(endpoint: E) -> E:
        setattr(endpoint, _BODY, declared)
        return endpoint

    return declare


class LaneRoute(APIRoute):
    """An ``APIRoute`` whose endpoint is called with the ``Request`` alone: no dependency
    injection, no body read or validated before it, none of the route's wrappers around it
    (its errors go to the application's exception handlers, as any route's do)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        declared = getattr(endpoint, _BODY, None)
        if declared is None:
            raise TypeError(f"{endpoint.__name__}: a LaneRoute's endpoint needs @reads_body")
        super().__init__(path, endpoint, **kwargs)
        self.body_field = _body_field(declared)  # the OpenAPI request body, and validated's
        self.app = self._serve

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.endpoint(Request(scope, receive))
        await response(scope, receive, send)


def _body_field(declared: Any) -> ModelField:
    """The field FastAPI makes of an endpoint parameter ``body: declared``."""

    def endpoint(body: Any) -> None:  # pragma: no cover - never called
        """A signature for FastAPI to read."""

    parameter = inspect.Parameter("body", inspect.Parameter.KEYWORD_ONLY, annotation=declared)
    endpoint.__signature__ = inspect.Signature([parameter])  # type: ignore[attr-defined]
    field = get_dependant(path="", call=endpoint).body_params[0]
    assert isinstance(field, ModelField)
    return field


async def validated(request: Request) -> Any:
    """The request's body as its route declares it (:func:`reads_body`), parsed and validated
    as FastAPI does for a body parameter: a RequestValidationError naming the fields, a 415
    for a body that is not JSON, a 422 for one that is not UTF-8 or nests too deep."""
    field: ModelField = request.scope["route"].body_field
    content_type = request.headers.get("content-type", "")
    body = await request.body()
    if not body:
        raise RequestValidationError(
            [{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}]
        )
    if not declares_json(content_type):
        raise not_json_error(content_type)
    try:
        parsed = _parse(body)
    except json.JSONDecodeError as error:
        raise RequestValidationError(
            [
                {
                    "type": "json_invalid",
                    "loc": ("body", error.pos),
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": error.msg},
                }
            ],
            body=error.doc,
        ) from error
    except (ValueError, RecursionError) as error:  # invalid UTF-8, or nesting too deep
        raise InvalidFieldError("body", unparseable_body(body)) from error
    value, errors = field.validate(parsed, {}, loc=("body",))
    if errors:
        raise RequestValidationError(errors, body=parsed)
    return value


def _parse(body: bytes) -> Any:
    """The body's JSON: orjson, and ``json`` for what orjson refuses (NaN and Infinity
    literals reach validation, which names the field; integers past 64 bits are parsed;
    malformed JSON gets ``json``'s message)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)
