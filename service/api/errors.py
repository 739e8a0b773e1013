"""Domain errors, and the one handler that maps them (and Redis faults) to HTTP answers.

Every error answers ``{"detail": "<plain sentence>"}``; a 422 adds ``errors``, one
``{"field", "message"}`` per invalid field. Redis being unreachable, loading, out of memory or
read-only is a 503 with ``Retry-After``, and so is any failure of the Redis client, whatever
exception redis-py raises on a broken connection (``client_failure``, in the store's
``failures`` module); an unexpected error of our own is a 500, logged with its traceback.
A 503 after a timeout does not prove that nothing was accepted (a stalled Redis may still run
the write later): a ``/learn`` retried with the same ``Idempotency-Key`` is never appended
twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis import exceptions as redis_errors
from starlette.exceptions import HTTPException
from starlette.routing import Match

from online_ctr.config.settings import Settings
from online_ctr.learning.snapshot import SnapshotError
from online_ctr.store.api_keys import ApiKeyError, UnknownKeyError
from online_ctr.store.failures import INTERNAL, client_failure
from online_ctr.store.impressions import JoinConflictError
from online_ctr.store.ingest import IdempotencyConflictError, ModelDeletedError
from online_ctr.store.memory import Throttle
from online_ctr.store.registry import RegistryError, UnknownNameError
from online_ctr.store.replication import ReplicaAckError
from online_ctr.store.snapshot_export import ModelNotFoundError
from online_ctr.store.snapshot_import import ModelExistsError, SpecConflictError
from online_ctr.store.state import ModelGoneError, ModelImportingError, ModelMismatchError
from service.api.limits import InvalidFieldError
from service.api.messages import field_errors, summary, unparseable_body

logger = logging.getLogger(__name__)

#: Redis replies that say "not now" rather than "never", besides the client's failures
#: (:func:`client_failure`): answered 503 with Retry-After.
TRANSIENT: tuple[type[Exception], ...] = (redis_errors.OutOfMemoryError,)
_TRANSIENT_REPLIES = ("MISCONF", "BUSY", "NOREPLICAS", "LOADING", "OOM", "READONLY")
#: What a 503 tells the client to do.
RETRY_ADVICE = (
    "retry shortly. A /learn request may have been accepted anyway: retrying it with the same "
    "Idempotency-Key is always safe"
)
#: What a 503 says when Redis refused a write at its memory limit. A /learn is one script,
#: refused before its first write (online_ctr.store.memory): nothing of it was stored.
MEMORY_FULL = (
    "Redis is at its memory limit (maxmemory; OCTR_REDIS_MAXMEMORY for the embedded Redis) "
    "and refuses writes: /learn is refused, nothing of the request stored, and learning "
    "waits; /predict still answers. Retry later: this passes when memory is freed or the "
    "limit is raised"
)
#: What a 503 says when the replicas did not acknowledge a write in time (OCTR_REPLICA_ACKS).
REPLICAS_BEHIND = (
    "Redis took the request but its replicas did not confirm it within "
    "OCTR_REPLICA_ACKS_TIMEOUT_MS, so a failover now could lose it. It may have been "
    "accepted: retry it with the same Idempotency-Key, which is always safe"
)
#: What a 503 says when Redis refused a command to the API's user (its ACL rules): the log
#: line names the user and the command, the client is told no more.
NOT_PERMITTED = (
    "Redis refused this service a command the request needs (its Redis user's ACL rules): "
    "an operator must fix the rules; the service log names the command"
)
#: Refusals at the memory limit are counted each and logged once a minute.
_MEMORY_LOG = Throttle()
#: FastAPI's answer to a body its JSON parser raised on (other than a JSON syntax error).
_UNPARSEABLE = "There was an error parsing the body"


class ApiError(Exception):
    """An error with an HTTP status and a message for the client."""

    status_code: ClassVar[int] = 500
    retry: ClassVar[bool] = False

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class UnknownModelError(ApiError):
    status_code = 404


class UnsupportedMediaTypeError(ApiError):
    status_code = 415


class NotReadyError(ApiError):
    status_code = 503
    retry = True


def redis_unavailable(error: Exception) -> bool:
    """Whether ``error`` means Redis cannot serve right now (as opposed to a bug)."""
    if isinstance(error, TRANSIENT) or client_failure(error):
        return True
    return isinstance(error, redis_errors.ResponseError) and str(error).startswith(
        _TRANSIENT_REPLIES
    )


def out_of_memory(error: Exception) -> bool:
    """Whether ``error`` is Redis refusing a write at its memory limit (an OOM reply)."""
    if isinstance(error, redis_errors.OutOfMemoryError):
        return True
    return isinstance(error, redis_errors.ResponseError) and str(error).startswith("OOM")


Answer = tuple[int, dict[str, object], Mapping[str, str] | None]

#: Refusals of the store (snapshots, the registry of models), by status; their messages say
#: what to do. The first class that matches wins.
SNAPSHOT_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (UnknownKeyError, 404),
    (ApiKeyError, 409),
    (UnknownNameError, 404),
    (ModelGoneError, 404),
    (ModelDeletedError, 404),
    (RegistryError, 409),
    (ModelNotFoundError, 404),
    (ModelExistsError, 409),
    (SpecConflictError, 409),
    (SnapshotError, 422),
)


def _invalid(errors: list[dict[str, str]]) -> Answer:
    return 422, {"detail": f"invalid request: {summary(errors)}", "errors": errors}, None


def _http(error: HTTPException, settings: Settings) -> Answer:
    detail = error.detail
    if error.status_code == 413:
        detail = f"the request body is larger than the limit of {settings.max_body_bytes} bytes"
    return error.status_code, {"detail": detail}, error.headers


def _snapshot(error: Exception, retry: Mapping[str, str]) -> Answer | None:
    """The answer to a snapshot refusal, or to a model still being imported (503)."""
    if isinstance(error, ModelImportingError):
        return 503, {"detail": str(error)}, retry
    for kind, status in SNAPSHOT_STATUS:
        if isinstance(error, kind):
            return status, {"detail": str(error)}, None
    return None


def _redis_unavailable(error: Exception, retry: Mapping[str, str]) -> Answer | None:
    """The 503 for Redis refusing now: at its memory limit, unavailable, or short of the
    replicas a write waits for; None otherwise."""
    if isinstance(error, ReplicaAckError):
        logger.warning("%s", error)
        return 503, {"detail": REPLICAS_BEHIND}, retry
    if out_of_memory(error):
        if _MEMORY_LOG.due():
            logger.warning("Redis refuses writes at its memory limit: %s", error)
        return 503, {"detail": MEMORY_FULL}, retry
    if redis_unavailable(error):
        logger.warning("Redis unavailable: %s: %s", type(error).__name__, error)
        # The class, not the message: the message names Redis's address, which is the log's.
        kind = type(error).__name__
        return 503, {"detail": f"Redis is unavailable ({kind}); {RETRY_ADVICE}"}, retry
    return None


def error_answer(error: Exception, settings: Settings) -> Answer:
    """Status, JSON body and headers for an error raised while serving."""
    retry = {"Retry-After": str(settings.retry_after_s)}
    if isinstance(error, ApiError):
        return error.status_code, {"detail": error.detail}, retry if error.retry else None
    if isinstance(error, RequestValidationError):
        return _invalid(field_errors(error.errors()))
    if isinstance(error, InvalidFieldError):
        return _invalid([{"field": error.field, "message": error.message}])
    if isinstance(error, IdempotencyConflictError | JoinConflictError):
        return 409, {"detail": str(error)}, None
    if isinstance(error, HTTPException):
        return _http(error, settings)
    snapshot = _snapshot(error, retry)
    if snapshot is not None:
        return snapshot
    if isinstance(error, redis_errors.NoPermissionError):
        logger.error("%s", error)  # one line: who was refused what (online_ctr.wiring)
        return 503, {"detail": NOT_PERMITTED}, None
    unavailable = _redis_unavailable(error, retry)
    if unavailable is not None:
        return unavailable
    if isinstance(error, ModelMismatchError):
        logger.error("%s", error)
        return 500, {"detail": str(error)}, None
    logger.error("unexpected error while serving", exc_info=error)
    return 500, {"detail": "internal error; see the service log"}, None


def declares_json(content_type: str) -> bool:
    """Whether a Content-Type is JSON (``application/json`` or ``application/*+json``)."""
    kind, _, subtype = content_type.partition(";")[0].strip().lower().partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


def _not_json(request: Request, error: RequestValidationError) -> UnsupportedMediaTypeError | None:
    """A 415 for a body that failed validation because it was never declared JSON.

    FastAPI parses only JSON-typed bodies; anything else fails validation, and this handler
    (not an extra dependency on the hot path) tells the client the actual problem.
    """
    content_type = request.headers.get("content-type", "")
    if declares_json(content_type) or not any(e["loc"][:1] == ("body",) for e in error.errors()):
        return None
    return not_json_error(content_type)


def not_json_error(content_type: str) -> UnsupportedMediaTypeError:
    """The 415 for a body sent with a ``content_type`` that is not JSON (or none)."""
    got = repr(content_type) if content_type else "no Content-Type"
    return UnsupportedMediaTypeError(
        f"send the body as JSON with 'Content-Type: application/json' (got {got})"
    )


async def handle_error(request: Request, error: Exception) -> JSONResponse:
    """The application's exception handler: every domain error becomes its HTTP answer."""
    if isinstance(error, RequestValidationError):
        error = _not_json(request, error) or error
    elif isinstance(error, HTTPException) and error.detail == _UNPARSEABLE:
        # Invalid UTF-8 or nesting beyond the parser's depth: say which, as a 422.
        error = InvalidFieldError("body", unparseable_body(await request.body()))
    status, body, headers = error_answer(error, request.app.state.settings)
    if request.scope["path"] == "/learn" and out_of_memory(error):
        request.app.state.metrics.redis_memory_refusals.labels("learn").inc()
    if status == 405:
        # Starlette names only the methods of the first route on the path; a path served by
        # several routes (GET and DELETE /models/{name}) must list them all.
        headers = {**(headers or {}), "Allow": _allowed_methods(request)}
    return JSONResponse(body, status_code=status, headers=headers)


def _allowed_methods(request: Request) -> str:
    """Every method some route serves on the request's path."""
    methods: set[str] = set()
    for route in request.app.routes:
        if route.matches(request.scope)[0] is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def install(app: FastAPI) -> None:
    """Route the errors this API maps through :func:`handle_error`."""
    for kind in (
        ApiError,
        RequestValidationError,
        InvalidFieldError,
        IdempotencyConflictError,
        JoinConflictError,
        HTTPException,
        redis_errors.RedisError,
        ModelMismatchError,
        *INTERNAL,  # what redis-py raises on a torn-down connection: 503, else a bug's 500
        *(kind for kind, _ in SNAPSHOT_STATUS),
    ):
        app.add_exception_handler(kind, handle_error)
