"""The fast lane of ``POST /predict``: a body :mod:`service.api.scan` reads is answered here,
in the ASGI layer, without going through the router.

A single ``/predict`` is small, so what the framework does around it is most of its cost:
routing, the route's request and exception wrappers, its exit stack, and reading the body
through a ``Request`` cost about a fifth of the API's CPU per single request (cProfile of the
app driven in-process). The lane does only what that request needs. Everything else takes the
usual path and answers as it always did: a body the scanner does not read, a group, a body
over the model's limits (the lane hands the body it read on), and every other route.

The lane sits inside :class:`~service.api.middleware.EdgeMiddleware`, so keys, body limits
and request counts apply to it as to any route; an error raised in it is answered by the
application's own exception handlers, so its answers are the route's.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.deps import requested
from service.api.routes.predict import answer
from service.api.scan import JSON_TYPE, scan
from service.api.served import ServedModel

#: Where the lane leaves an error for the application's handlers to answer.
_ERROR = "octr.lane_error"


async def _raise(scope: Scope, receive: Receive, send: Send) -> None:
    raise scope.pop(_ERROR)


class PredictLane:
    """ASGI middleware: answers ``POST /predict`` bodies the scanner reads, passes on the rest.

    ``fastapi`` is the application, for its exception handlers and its ``/predict`` route
    (the route label of the request count); the middleware stack is built at the first
    request, when both are complete.
    """

    def __init__(self, app: ASGIApp, fastapi: FastAPI) -> None:
        self.app = app
        self.route = _route(fastapi.routes, "/predict", "POST")
        handlers = {
            key: handler
            for key, handler in fastapi.exception_handlers.items()
            if key not in (500, Exception)  # those are the outermost middleware's, as here
        }
        self.errors = ExceptionMiddleware(_raise, handlers=handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_predict(scope):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        scope["route"] = self.route
        try:
            body = await _body(receive)
            if await self._answer(scope, receive, send, body, started):
                return
        except Exception as error:  # what the route would have raised: answered the same way
            scope[_ERROR] = error
            await self.errors(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, started: float
    ) -> bool:
        """Answer a body the scanner reads, for a model (not a group) within its limits."""
        scanned = scan(body, want_label=False)
        if scanned is None:
            return False
        model = await requested(Request(scope))
        if not isinstance(model, ServedModel) or not scanned.within(model.limits):
            return False
        scores = await model.predict_hashed(model.names.batch(body, scanned))
        await answer(model, scores, scanned.single, started)(scope, receive, send)
        return True


def _is_predict(scope: Scope) -> bool:
    """A JSON ``POST /predict``."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return False
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root):  # behind a proxy's prefix, as the router sees it
        path = path[len(root) :]
    if path != "/predict":
        return False
    for name, value in scope["headers"]:
        if name == b"content-type":
            return JSON_TYPE.fullmatch(value.decode("latin-1")) is not None
    return False


async def _body(receive: Receive) -> bytes:
    """The whole request body, as ``Request.body()`` reads it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with ``body`` given back first: the lane has read it already."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def _route(routes: list[BaseRoute], path: str, method: str) -> Any:
    for route in routes:
        if getattr(route, "path", None) == path and method in getattr(route, "methods", ()):
            return route
    raise LookupError(f"no {method} {path} route")
