"""Counting every HTTP answer by method, route template and status class.

A plain ASGI middleware rather than ``BaseHTTPMiddleware``: it adds one wrapped ``send`` per
request and no task or stream, which matters on the /predict path.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: Methods counted by name; anything else a client sends is ``other`` (labels stay bounded).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The route label of requests that matched no route (never the raw path: it is unbounded).
UNMATCHED = "unmatched"


class RequestMetricsMiddleware:
    """Increments ``http_requests{method, route, status_class}`` once per response."""

    def __init__(self, app: ASGIApp, requests: Counter) -> None:
        self.app = app
        self.requests = requests
        self._series: dict[tuple[str, str, int], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # if the app raises before answering, the server answers 500

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
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
