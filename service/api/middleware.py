"""The one middleware: it counts every HTTP answer and enforces the request-body size limit.

A plain ASGI class rather than ``BaseHTTPMiddleware`` (no task or stream per request), and one
layer rather than two (or FastAPI's own ``max_body_size``, which nests a limiter per router):
each layer costs per request, and ``/predict`` is benchmarked against a bare endpoint.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Methods counted by name; anything else a client sends is ``other`` (labels stay bounded).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The route label of requests that matched no route (never the raw path: it is unbounded).
UNMATCHED = "unmatched"


class BodyTooLargeError(HTTPException):
    """The request body is (or declares itself) larger than the limit."""

    def __init__(self) -> None:
        super().__init__(status_code=413)


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, if it sent a valid one."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


class EdgeMiddleware:
    """Counts ``http_requests{method, route, status_class}`` once per response, and refuses
    a body over ``max_body_bytes`` by its Content-Length or, if that lies or is absent, by the
    bytes actually received.

    The limit is raised from ``receive`` as an HTTP 413 error: the route is then known (for
    the route label), and the application's error handler writes the answer.
    """

    def __init__(self, app: ASGIApp, requests: Counter, max_body_bytes: int) -> None:
        self.app = app
        self.requests = requests
        self.max_body_bytes = max_body_bytes
        self._series: dict[tuple[str, str, int], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # if the app raises before answering, the server answers 500
        received = -1  # -1: Content-Length not checked yet

        async def receive_limited() -> Message:
            nonlocal received
            if received < 0:
                if (declared_length(scope) or 0) > self.max_body_bytes:
                    raise BodyTooLargeError
                received = 0
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                raise BodyTooLargeError
            return message

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive_limited, send_counted)
        finally:
            self._series_for(scope, status // 100).inc()

    def _series_for(self, scope: Scope, status_class: int) -> Any:
        """The counter child for this answer, created once per label combination."""
        route = scope.get("route")
        template = getattr(route, "path", None) or UNMATCHED
        method = scope["method"] if scope["method"] in METHODS else "other"
        key = (method, template, status_class)
        series = self._series.get(key)
        if series is None:
            series = self.requests.labels(method, template, f"{status_class}xx")
            self._series[key] = series
        return series
