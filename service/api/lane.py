"""How ``POST /predict`` and ``POST /learn`` are served: one route each, whose endpoint takes
the ``Request`` and reads its body itself, so that the compiled scan is a step inside it.

A single ``/predict`` is small, so what the framework does around it is most of its cost:
dependency injection, validating the body with pydantic, the router's match over every route,
the exception and exit-stack layers around it, and reading the body through ``Request.body()``
(an async generator, registered with the event loop and closed per request). So:

* :class:`LaneRoute` calls the endpoint with a ``Request`` whose body it has read already,
  with a plain ``receive`` loop (:func:`read_body`). The endpoint answers a body
  :mod:`service.api.scan` reads from its bytes, and parses and validates any other with
  :func:`validated`, exactly as FastAPI would have (same field, same errors). The body's model,
  named by :func:`reads_body` above the endpoint, is the route's ``body_field``: FastAPI's
  OpenAPI document describes the request body from it, as for a route that takes the model.
* :class:`LaneDispatch`, a middleware, sends a ``POST`` to a :class:`LaneRoute`'s path to that
  route directly, past the router; its errors go to the application's exception handlers, as
  any route's do.

Measured in-process (the app driven by raw ASGI calls, 32 concurrent single ``/predict``, CPU
per request): through the router 65 us; dispatched, but reading the body with
``Request.body()`` and entering through ``route.handle``, 57 us; as here 52.6 us, against
52.0 us for the ``/predict``-only ASGI lane this replaced.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request, Response
from fastapi._compat import ModelField
from fastapi.dependencies.utils import get_dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from service.api.errors import declares_json, not_json_error
from service.api.limits import InvalidFieldError
from service.api.messages import unparseable_body

Endpoint = Callable[["ReadRequest"], Awaitable[Response]]
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
        self.app = self.serve

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body, call the endpoint with the request, send its answer."""
        response = await self.endpoint(ReadRequest(scope, receive, await read_body(receive)))
        await response(scope, receive, send)


class ReadRequest(Request):
    """A ``Request`` whose body has been read: ``raw`` is it, and ``body()``, ``json()`` and
    ``stream()`` give it (Starlette keeps a read body in ``_body``, as its cached requests do)."""

    def __init__(self, scope: Scope, receive: Receive, body: bytes) -> None:
        super().__init__(scope, receive)
        self._body = body
        self.raw = body


async def read_body(receive: Receive) -> bytes:
    """The whole request body, as ``Request.body()`` reads it (a ClientDisconnect if the
    client goes away first), in a plain loop rather than an async generator."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


#: Where the dispatch leaves an error for the application's handlers to answer (a scope key,
#: namespaced with the project's name; hyphenated, so no one reads it as a module).
_ERROR = "online-ctr.lane_error"


async def _raise(scope: Scope, receive: Receive, send: Send) -> None:
    raise scope.pop(_ERROR)


class LaneDispatch:
    """ASGI middleware: a ``POST`` to the path of a :class:`LaneRoute` goes to that route
    directly (see the module doc); everything else to the application as usual.

    It sits inside :class:`~service.api.middleware.EdgeMiddleware`, so keys, body limits and
    request counts apply as to any route; ``fastapi`` is the application, for its lane routes
    and exception handlers (the middleware stack is built at the first request, when both
    are complete).
    """

    def __init__(self, app: ASGIApp, fastapi: FastAPI) -> None:
        self.app = app
        self.routes = {
            route.path: route for route in fastapi.routes if isinstance(route, LaneRoute)
        }
        handlers = {
            key: handler
            for key, handler in fastapi.exception_handlers.items()
            if key not in (500, Exception)  # those are the outermost middleware's, as here
        }
        self.errors = ExceptionMiddleware(_raise, handlers=handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self._route(scope)
        if route is None:
            await self.app(scope, receive, send)
            return
        scope["route"] = route  # the request count's label, as the router would set it
        try:
            await route.serve(scope, receive, send)  # a POST-only route: no method to check
        except Exception as error:  # what the route raised: answered as the router would
            scope[_ERROR] = error
            await self.errors(scope, receive, send)

    def _route(self, scope: Scope) -> LaneRoute | None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):  # behind a proxy's prefix, as the router sees it
            path = path[len(root) :]
        return self.routes.get(path)


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
