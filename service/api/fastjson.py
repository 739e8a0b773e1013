"""Request bodies parsed by orjson: ``/learn`` and ``/predict`` route classes use it.

Starlette parses JSON with the standard library's ``json``, which was a fifth of the CPU of a
1,000-example ``/learn`` (py-spy); orjson parses the same bodies in C several times faster.
A body orjson refuses is parsed again by ``json``, so that what users see is unchanged: NaN
and Infinity literals reach validation, which names the field (orjson rejects them outright),
integers past 64 bits are parsed, and malformed JSON gets ``json``'s message.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute


class FastJSONRequest(Request):
    """The route's view of ``request``: its body is read (and kept) by ``request`` itself,
    so the error handlers, which get ``request``, can read it again to explain a refusal."""

    def __init__(self, request: Request) -> None:
        super().__init__(request.scope, request.receive)
        self._request = request

    async def body(self) -> bytes:
        return await self._request.body()

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = orjson.loads(body)
            except orjson.JSONDecodeError:
                self._json = json.loads(body)
        return self._json


class FastJSONRoute(APIRoute):
    """An ``APIRoute`` whose endpoint reads its body through :class:`FastJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(FastJSONRequest(request))

        return route


def scanned_route(fast: Callable[[Request], Awaitable[Response | None]]) -> type[APIRoute]:
    """A :class:`FastJSONRoute` that first offers each request to ``fast``, which answers
    the bodies :mod:`service.api.scan` reads without parsing them into objects; a request it
    answers None for goes to the endpoint through validation, as every other route's."""

    class ScannedRoute(FastJSONRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def route(request: Request) -> Response:
                return await fast(request) or await handler(request)

            return route

    return ScannedRoute
