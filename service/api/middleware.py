"""The one middleware: it checks API keys, counts every HTTP answer and guards request bodies
(size limit, encoding, read timeout); a client gone mid-request is logged in one line.

A plain ASGI class rather than ``BaseHTTPMiddleware`` (no task or stream per request), and one
layer rather than several (or FastAPI's own ``max_body_size``, which nests a limiter per
router): each layer costs per request, and ``/predict`` is benchmarked against a bare endpoint.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from typing import Any

from prometheus_client import Counter
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from online_ctr.store.keys import MODEL_NAME
from service.api.auth import DOCS_ASSETS_URL, Authenticator, refusal, route_path
from service.api.key_shares import KeyShares

logger = logging.getLogger(__name__)

#: Methods counted by name; anything else a client sends is ``other`` (labels stay bounded).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The route label of requests that matched no route (never the raw path: it is unbounded).
UNMATCHED = "unmatched"
_DOCS_ASSETS = DOCS_ASSETS_URL + "/"
#: Content-Encoding values that leave the body as sent.
_IDENTITY = (b"", b"identity")
#: The one route whose body is streamed, not size-limited: a snapshot upload to a valid name.
_SNAPSHOT_PATH = re.compile(rf"/models/{MODEL_NAME.pattern.strip('^$')}/snapshot")
#: The status counted for a request whose client went away before its answer (nginx's).
CLIENT_GONE = 499


class BodyTooLargeError(HTTPException):
    """The request body is (or declares itself) larger than the limit."""

    def __init__(self) -> None:
        super().__init__(status_code=413)


class BodyTimeoutError(HTTPException):
    """The body did not arrive in time (e.g. shorter than its Content-Length)."""

    def __init__(self, timeout_s: float) -> None:
        detail = (
            f"the request body did not arrive within {timeout_s:g}s (OCTR_BODY_TIMEOUT_S); "
            "send the whole body at once, exactly as long as its Content-Length"
        )
        super().__init__(status_code=408, detail=detail, headers={"Connection": "close"})


class UploadTimeoutError(HTTPException):
    """A streamed upload that kept arriving but did not end within its overall deadline."""

    def __init__(self, timeout_s: float) -> None:
        detail = (
            f"the upload did not complete within {timeout_s:g}s (OCTR_UPLOAD_TIMEOUT_S); "
            "send it faster, or ask for a longer OCTR_UPLOAD_TIMEOUT_S"
        )
        super().__init__(status_code=408, detail=detail, headers={"Connection": "close"})


def encoded_body_error(encoding: bytes) -> HTTPException:
    """The 415 for a compressed (or otherwise encoded) body."""
    shown = encoding.decode("latin-1")[:40]
    return HTTPException(
        status_code=415,
        detail=f"Content-Encoding {shown!r} is not supported; send the JSON body uncompressed",
    )


def unrouted_template(path: str) -> str:
    """The route label of an answer without a route: the docs assets' mount, or unmatched."""
    # A mount sets no route in the scope, and its files' paths must not become labels.
    return DOCS_ASSETS_URL if path.startswith(_DOCS_ASSETS) else UNMATCHED


def route_template(scope: Scope) -> str:
    """The request's route as declared (``/models/{name}/snapshot``), never the raw path."""
    route = scope.get("route")
    return getattr(route, "path", None) or unrouted_template(scope["path"])


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, if it sent a valid one."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def content_encoding(scope: Scope) -> bytes:
    """The request's Content-Encoding, lower-cased; empty if it sent none."""
    for name, value in scope["headers"]:
        if name == b"content-encoding":
            return bytes(value).strip().lower()
    return b""


def streamed_upload(scope: Scope) -> bool:
    """Whether the request uploads a snapshot (``PUT /models/{name}/snapshot``): a body read
    as a stream, of any size, which must keep arriving rather than arrive whole in time."""
    # Exactly the route, with a name it accepts: any other path (``/models/snapshot`` is
    # ``PUT /models/{name}``, a JSON body) keeps the size limit.
    return scope["method"] == "PUT" and _SNAPSHOT_PATH.fullmatch(scope["path"]) is not None


def upload_timeout_s(scope: Scope) -> float:
    """The application's OCTR_UPLOAD_TIMEOUT_S (its settings are on the app in the scope)."""
    return float(scope["app"].state.settings.upload_timeout_s)


class BodyGuard:
    """``receive`` for one request: checks the headers at the first call, then counts the
    bytes against the size limit and waits for them no longer than the body deadline. With
    ``total_s`` (a streamed upload), each piece must come within ``timeout_s`` and the whole
    body within ``total_s``."""

    __slots__ = (
        "deadline",
        "end",
        "expired",
        "limit",
        "received",
        "scope",
        "source",
        "timeout_s",
        "total_s",
    )

    def __init__(
        self,
        scope: Scope,
        source: Receive,
        limit: int,
        timeout_s: float,
        total_s: float | None = None,
    ) -> None:
        self.scope = scope
        self.source = source
        self.limit = limit
        self.timeout_s = timeout_s
        self.total_s = total_s
        self.received = -1  # -1: headers not checked yet
        self.deadline = 1.0  # set at the first receive; 0: the body is complete
        self.end = 0.0  # when the whole body must have arrived
        self.expired = False

    def _expire(self, task: asyncio.Task[Any]) -> None:
        self.expired = True
        task.cancel()

    def _check_headers(self) -> None:
        if (declared_length(self.scope) or 0) > self.limit:
            raise BodyTooLargeError
        encoding = content_encoding(self.scope)
        if encoding not in _IDENTITY:
            raise encoded_body_error(encoding)
        self.received = 0
        now = asyncio.get_running_loop().time()
        self.end = now + (self.total_s or self.timeout_s)
        self.deadline = min(now + self.timeout_s, self.end)

    def _timeout(self) -> HTTPException:
        """The 408 for the deadline that passed: the whole body's, or one piece's."""
        if self.total_s is not None and self.deadline >= self.end:
            return UploadTimeoutError(self.total_s)
        return BodyTimeoutError(self.timeout_s)

    async def receive(self) -> Message:
        if self.received < 0:
            self._check_headers()
        if not self.deadline:  # the body is complete: a later receive waits for a disconnect
            return await self.source()
        # A deadline for the whole body: a client that stalls mid-body (or sends less than its
        # Content-Length) would otherwise hold the request open forever. A bare timer rather
        # than asyncio.timeout(), which cost ~10 us per receive here against ~2.5 us.
        task = asyncio.current_task()
        assert task is not None
        timer = asyncio.get_running_loop().call_at(self.deadline, self._expire, task)
        try:
            message = await self.source()
        except asyncio.CancelledError:
            if not self.expired:
                raise
            task.uncancel()
            raise self._timeout() from None
        finally:
            timer.cancel()
        if not message.get("more_body", False):
            self.deadline = 0.0
        elif self.total_s is not None:  # the next piece has its own wait, within the whole's
            self.deadline = min(asyncio.get_running_loop().time() + self.timeout_s, self.end)
        self.received += len(message.get("body", b""))
        if self.received > self.limit:
            raise BodyTooLargeError
        return message


class EdgeMiddleware:
    """Refuses requests without a key of the needed scope (401/403); counts
    ``http_requests{method, route, status_class}`` once per response; refuses a body over
    ``max_body_bytes`` by its Content-Length or by the bytes received (413), a body with a
    Content-Encoding (415), and a body that takes longer than ``body_timeout_s`` (408); a
    snapshot upload has no size limit, but each piece must come within ``body_timeout_s`` and
    the whole within OCTR_UPLOAD_TIMEOUT_S.

    Body errors are raised from ``receive`` as HTTP errors: the route is then known (for the
    route label), and the application's error handler writes the answer.
    """

    def __init__(
        self,
        app: ASGIApp,
        requests: Counter,
        max_body_bytes: int,
        body_timeout_s: float,
        auth: Authenticator | None,
        shares: KeyShares | None = None,
        busy: Any = None,
        retry_after_s: int = 1,
    ) -> None:
        """``shares``: requests in progress per key (OCTR_MAX_REQUESTS_PER_KEY), a 429 past
        it, counted in ``busy`` (a counter child) too."""
        self.app = app
        self.requests = requests
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.auth = auth
        self.shares = shares
        self.busy = busy
        self.retry_after_s = retry_after_s
        self._series: dict[tuple[str, str, int], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.auth is not None:
            refused = refusal(self.auth, scope)
            if refused is not None:
                await send(refused[0])
                await send(refused[1])
                template = self.auth.template(route_path(scope))
                self._series_for(scope, template, refused[0]["status"] // 100).inc()
                return
        share = self.shares.take(scope) if self.shares is not None else None
        if share is False:
            await self._refuse_busy(scope, send)
            return
        try:
            await self._serve(scope, receive, send)
        finally:
            if isinstance(share, bytes) and self.shares is not None:
                self.shares.release(share)

    async def _refuse_busy(self, scope: Scope, send: Send) -> None:
        assert self.shares is not None
        start, body = self.shares.refusal(self.retry_after_s)
        await send(start)
        await send(body)
        if self.busy is not None:
            self.busy.inc()
        self._series_for(scope, route_template(scope), 4).inc()

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The request past its key's checks: its body guarded, its answer counted."""
        status = 500  # if the app raises before answering, the server answers 500
        if streamed_upload(scope):  # a snapshot: no size limit, one deadline for the whole
            total_s = upload_timeout_s(scope)
            guarded = BodyGuard(scope, receive, sys.maxsize, self.body_timeout_s, total_s)
        else:
            guarded = BodyGuard(scope, receive, self.max_body_bytes, self.body_timeout_s)

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, guarded.receive, send_counted)
        except ClientDisconnect:
            # Nobody to answer, and nothing wrong with the service: one line, not the server's
            # "Exception in ASGI application" traceback (the route has undone its work).
            status = CLIENT_GONE
            logger.info(
                "%s %s: the client disconnected before the request ended (%d body bytes read)",
                scope["method"],
                route_template(scope),
                max(guarded.received, 0),
            )
        finally:
            self._series_for(scope, route_template(scope), status // 100).inc()

    def _series_for(self, scope: Scope, template: str, status_class: int) -> Any:
        """The counter child for this answer, created once per label combination."""
        method = scope["method"] if scope["method"] in METHODS else "other"
        key = (method, template, status_class)
        series = self._series.get(key)
        if series is None:
            series = self.requests.labels(method, template, f"{status_class}xx")
            self._series[key] = series
        return series
