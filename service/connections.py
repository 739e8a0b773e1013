"""The bounds of an HTTP connection, kept where uvicorn reads its bytes (issue 33).

uvicorn serves the API with httptools (``http="auto"`` picks it when it is installed), which
is faster than h11 on ``/predict`` but bounds nothing itself: its parser holds a request's
head however large it grows, and a connection that never sends anything, or that sends its
head slowly, stays open for good. :func:`bounded_protocol` is uvicorn's httptools protocol
with the bounds of the settings, each counted in ``online_ctr_http_refusals``:

- ``OCTR_MAX_HEADER_BYTES``: a head (request line and headers) larger is answered 431 and the
  connection closed. A complete head is measured when it ends; one still arriving, after each
  read, so memory stays within the bound plus one read however long the head goes on;
- ``OCTR_HEADER_TIMEOUT_S``: a head not complete that long after it began (or after the
  connection opened, for its first request) closes the connection, with a 408 if it began;
- ``OCTR_IDLE_TIMEOUT_S``: a connection with no request in progress, a new one included,
  is closed after that long (uvicorn's keep-alive timeout, which a new connection lacked);
- ``OCTR_MAX_CONNECTIONS``: a connection past it first closes one without a request in
  progress (idle, or sending its head), counted as ``idle_evicted``: one that never completed
  a request before any that did, the longest waiting first, so that a flood of connections
  that send nothing never pushes out a client's kept-alive connection. Only when every
  connection is busy with a request is the new one answered 503 with ``Retry-After`` as soon
  as it opens. Open connections, and so file descriptors, stay bounded (with as many again
  refused and closing, :data:`LINGER_S` each at most).

A refused connection is closed the way RFC 9112 (9.6) asks: the answer, then the end of what
we send, then what the client still sends is read and dropped for up to :data:`LINGER_S`, so
that a reset does not destroy the answer before the client reads it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus
from typing import Any, ClassVar

from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from online_ctr.config.settings import Settings
from online_ctr.metrics import Metrics

#: How long a refused connection is read and dropped before it is closed (Apache lingers up
#: to 2 s): enough for a request already on its way to arrive, too short to hold a descriptor.
LINGER_S = 1.0
#: The order in which connections began to wait (see ``waiting_since``).
WAITING = itertools.count()


class Phase(Enum):
    """Where a connection's parser is: between requests, in a request's head, or past it."""

    IDLE = 0
    HEAD = 1
    BODY = 2


@dataclass(frozen=True)
class Answer:
    """An HTTP answer that ends its connection, with a ``{"detail": ...}`` JSON body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    @classmethod
    def of(cls, status: int, detail: str, *extra: tuple[bytes, bytes]) -> Answer:
        body = json.dumps({"detail": detail}).encode()
        headers = (
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            *extra,
        )
        return cls(status, headers, body)

    def encode(self) -> bytes:
        """The answer as written to the socket."""
        phrase = HTTPStatus(self.status).phrase
        lines = [f"HTTP/1.1 {self.status} {phrase}".encode()]
        lines += [name + b": " + value for name, value in self.headers]
        return b"\r\n".join([*lines, b"", self.body])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The answer as an ASGI app, for uvicorn's own request cycle to send."""
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


def answers(settings: Settings) -> dict[str, Answer]:
    """The answer to each refusal, by the reason it is counted under."""
    retry = (b"retry-after", str(settings.retry_after_s).encode())
    return {
        "header_bytes": Answer.of(
            431,
            f"the request line and headers are larger than {settings.max_header_bytes} bytes "
            "(OCTR_MAX_HEADER_BYTES); send fewer or shorter headers",
        ),
        "header_timeout": Answer.of(
            408,
            f"the request's headers did not arrive within {settings.header_timeout_s:g}s "
            "(OCTR_HEADER_TIMEOUT_S); send them at once",
        ),
        "concurrency": Answer.of(
            503,
            f"the API has its most open connections ({settings.max_connections}, "
            "OCTR_MAX_CONNECTIONS); retry after Retry-After seconds",
            retry,
        ),
    }


class RequestsInProgress:
    """The requests in progress in the server that serves an app: uvicorn's set of request
    tasks, one per request from its head's end to its answer's, shared by every connection
    (uvicorn bounds ``limit_concurrency`` with it), from the first connection on. Empty where
    no server runs the app (a test that calls it directly)."""

    def __init__(self) -> None:
        self.tasks: Collection[object] = ()

    def others(self) -> bool:
        """Whether the server holds a request other than the caller's."""
        return len(self.tasks) > 1


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol held to the bounds of its settings (the module's text).

    A subclass per app (:func:`bounded_protocol`) sets the class attributes: uvicorn builds a
    protocol per connection from the class alone.
    """

    settings: ClassVar[Settings]
    metrics: ClassVar[Metrics]
    answers: ClassVar[dict[str, Answer]]
    in_progress: ClassVar[RequestsInProgress]
    #: The connections refused and lingering: as many at most as may be open, so that
    #: descriptors stay bounded in a burst (past it, a refusal closes at once).
    refused: ClassVar[set[BoundedHttpToolsProtocol]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_progress.tasks = self.tasks  # the server's, the same for every connection
        self.limit_concurrency = None  # refused when they open instead, with Retry-After
        # uvicorn types it as the int of its Config; the loop takes any number of seconds.
        self.timeout_keep_alive = self.settings.idle_timeout_s  # type: ignore[assignment]
        self.phase = Phase.IDLE
        self.head_bytes = 0  # of the reads that the head in progress spans
        self.completed = False  # a request ended in the read being parsed
        self.lingering = False  # refused: what arrives is dropped until it closes
        # When it last had no request in progress, as a count of such moments (strictly
        # ordered, unlike a clock): the longest waiting is closed first when a new connection
        # would pass OCTR_MAX_CONNECTIONS.
        self.waiting_since = next(WAITING)
        self.requests = 0  # completed on this connection
        # The head's deadline; once refused, the end of lingering.
        self.deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.settings.max_connections and not self.evict_one():
            self.connections.discard(self)  # closing: it does not keep another out
            self.refuse("concurrency")
            return
        self.metrics.http_connections.set(len(self.connections))
        # A new connection is idle until it sends, and its first head is due from now.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.settings.idle_timeout_s, self.timeout_keep_alive_handler
        )
        self.deadline = self.loop.call_later(self.settings.header_timeout_s, self.head_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._unset_keepalive_if_required()  # uvicorn leaves it armed after an error
        self.stop_deadline()
        self.refused.discard(self)
        self.metrics.http_connections.set(len(self.connections))

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return
        counted = self.phase is not Phase.BODY
        self.completed = False
        super().data_received(data)
        if self.phase is not Phase.HEAD or self.transport.is_closing():
            return
        # A read that also held the end of a request is not counted: its size says nothing
        # of the head that began after it (the next read is).
        if counted and not self.completed:
            self.head_bytes += len(data)
            if self.head_bytes > self.settings.max_header_bytes:
                self.refuse("header_bytes")
                return
        if self.deadline is None:
            self.deadline = self.loop.call_later(self.settings.header_timeout_s, self.head_timeout)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.phase = Phase.HEAD
        self.head_bytes = 0

    def on_headers_complete(self) -> None:
        self.phase = Phase.BODY
        self.stop_deadline()
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size <= self.settings.max_header_bytes:
            super().on_headers_complete()
            return
        self.metrics.http_refusals.labels("header_bytes").inc()
        # uvicorn's own request cycle sends the 431 (and reads what body follows), as it
        # sends its own 503s: the app of this one request is the answer.
        app, self.app = self.app, self.answers["header_bytes"]
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.phase = Phase.IDLE
        self.completed = True
        self.waiting_since = next(WAITING)
        self.requests += 1

    def evict_one(self) -> bool:
        """Close a connection with no request in progress (idle or in its head) to make room
        for this one: one that never completed a request first, then the longest waiting;
        False if every other one is busy."""
        waiting = [
            other
            for other in self.connections
            if isinstance(other, BoundedHttpToolsProtocol)
            and other is not self
            and other.phase is not Phase.BODY
            and not other.answering()
            and not other.transport.is_closing()
        ]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda other: (other.requests > 0, other.waiting_since))
        oldest.connections.discard(oldest)  # closing: it does not count any more
        oldest.refuse("idle_evicted", answer=False)
        return True

    def head_timeout(self) -> None:
        """A head is late: answered 408 if it began, the connection closed."""
        self.deadline = None
        if not self.transport.is_closing():
            self.refuse("header_timeout", answer=self.phase is Phase.HEAD)

    def refuse(self, reason: str, answer: bool = True) -> None:
        """Count a refusal under ``reason`` and close the connection: at once if there is no
        answer to give, or another answer is in progress on it; else after the answer and
        lingering (see the module's text)."""
        self.metrics.http_refusals.labels(reason).inc()
        self._unset_keepalive_if_required()
        self.stop_deadline()
        if not answer or self.answering():
            self.transport.close()
            return
        self.transport.write(self.answers[reason].encode())
        crowded = len(self.refused) >= self.settings.max_connections
        if crowded or not self.transport.can_write_eof():  # TLS: no half-close
            self.transport.close()
            return
        self.transport.write_eof()
        self.lingering = True
        self.refused.add(self)
        if reason == "header_bytes":
            # A head past the bound may go on arriving at the sender's full rate: reading it
            # only to drop it cost a core under a flood of 64 KB header lines. Not read, it
            # stops in the sender's TCP window; the answer was sent first.
            self.transport.pause_reading()
        # Closed sooner if the client closes first (uvicorn's eof_received closes then).
        self.deadline = self.loop.call_later(LINGER_S, self.transport.close)

    def answering(self) -> bool:
        """Whether a response is being produced on this connection now."""
        return self.cycle is not None and not self.cycle.response_complete

    def stop_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None


def bounded_protocol(
    settings: Settings, metrics: Metrics, requests: RequestsInProgress | None = None
) -> type[BoundedHttpToolsProtocol]:
    """The protocol class to pass uvicorn as ``http=``: bounded by ``settings``, counted in
    ``metrics`` (the app's, ``app.state.metrics``; a test's on a private registry), telling
    ``requests`` (the app's, ``app.state.requests``) which requests are in progress."""

    class Protocol(BoundedHttpToolsProtocol):
        pass

    Protocol.settings = settings
    Protocol.metrics = metrics
    Protocol.answers = answers(settings)
    Protocol.refused = set()
    Protocol.in_progress = RequestsInProgress() if requests is None else requests
    return Protocol
