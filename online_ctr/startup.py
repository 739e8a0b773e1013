"""Checks a process makes before it starts serving, each failing as one :class:`StartupError`
line that names the setting and what to do: a port in use, a Redis that never answers (or
that TLS keeps out: :mod:`online_ctr.store.tls_probe`), an open-file limit too low for
``OCTR_MAX_CONNECTIONS``.

The API, the worker and ``serve`` start alike on a Redis that is not up yet, or restarting:
every startup step that talks to Redis runs under :func:`on_redis`, which waits for Redis
(``OCTR_REDIS_WAIT_S`` in all) whenever a step finds it away, and then tries the steps again.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import redis
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    NoPermissionError,
    TryAgainError,
)

from online_ctr.config.settings import Settings
from online_ctr.process import StartupError
from online_ctr.store.failures import client_failure
from online_ctr.store.tls_probe import tls_trouble
from online_ctr.wiring import prepare_redis, redis_client

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Replies of a Redis that is starting (loading its data), restarting or failing over.
_AWAY_REPLIES = ("LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN")
#: Seconds between tries; of quiet waiting first (a Redis restarting is back within it, and a
#: wait of a second ends in one line); between the lines saying the process is still waiting.
_RETRY_S = 0.2
_QUIET_S = 1.0
_REPEAT_LOG_S = 5.0
#: File descriptors kept for what is neither a client's connection nor Redis's: the listening
#: socket, the event loop's, logs, snapshot files (an API serving /predict holds 15).
FD_RESERVE = 64
#: The soft limit asked for when the hard one is unlimited (macOS refuses more than this).
_FD_CEILING = 1 << 20


def check_port(host: str, port: int, variable: str, flag: str | None = None) -> None:
    """Fail unless ``host:port`` can be bound now (0 means "any port" and always can); the
    message names the ``variable`` and the command's ``flag`` that set the port."""
    if not port:
        return
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        # As uvicorn and prometheus_client bind: a port in TIME_WAIT is free to them.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                also = f" (or {flag})" if flag else ""
                raise StartupError(
                    f"port {port} on {host} ({variable}) is already in use; stop what "
                    f"listens there or set {variable}{also} to a free port"
                ) from None
            raise StartupError(
                f"cannot listen on {host}:{port} ({variable}): {error.strerror}"
            ) from None


def redis_away(error: BaseException) -> bool:
    """Whether ``error`` means Redis is not there or not ready yet (as opposed to refusing)."""
    if isinstance(error, redis.AuthenticationError):  # a ConnectionError, but no wait helps
        return False
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError, OSError)):
        return True  # ConnectionError includes a Redis still loading its data (LOADING)
    if client_failure(error):  # whatever redis-py raised on a broken connection
        return True
    if isinstance(error, (ClusterDownError, TryAgainError)):
        return True
    return isinstance(error, redis.ResponseError) and str(error).startswith(_AWAY_REPLIES)


async def on_redis(
    settings: Settings,
    steps: Callable[[], Awaitable[T]],
    stopping: Callable[[], bool] = lambda: False,
) -> T | None:
    """Run the startup ``steps`` (all of them again after any fails) until they get through to
    Redis; None if ``stopping`` says so meanwhile. Redis away for ``OCTR_REDIS_WAIT_S`` in all
    is one :class:`StartupError` line, as wrong credentials are at once."""
    url = str(settings.redis_url)
    started = time.monotonic()
    deadline = started + settings.redis_wait_s
    next_log, logged = started + _QUIET_S, False
    while not stopping():
        try:
            done = await steps()
        except Exception as error:  # what redis-py raised; a bug is raised again below
            await _unless_tls_trouble(error, settings)
            _unless_waitable(error, url, settings.redis_wait_s, deadline)
            now = time.monotonic()
            if now >= next_log:
                next_log, logged = now + _REPEAT_LOG_S, True
                logger.warning(
                    "waiting for Redis at %s (%s: %s); %.0fs left of OCTR_REDIS_WAIT_S",
                    redis_address(url),
                    type(error).__name__,
                    error,
                    deadline - now,
                )
            await asyncio.sleep(_RETRY_S)
            continue
        if logged:
            logger.info("Redis answered after %.1fs", time.monotonic() - started)
        return done
    return None


async def _unless_tls_trouble(error: Exception, settings: Settings) -> None:
    """Return unless a failure to connect comes from TLS (a certificate, or TLS on one side
    only), which no wait mends: then the one line that says which setting to change."""
    connecting = isinstance(error, (redis.ConnectionError, redis.TimeoutError, OSError))
    if not connecting or isinstance(error, (redis.AuthenticationError, BusyLoadingError)):
        return
    trouble = await asyncio.to_thread(
        tls_trouble, settings.redis_url, settings.tls_files(), settings.redis_timeout_s
    )
    if trouble is not None:
        raise StartupError(trouble) from None


def _unless_waitable(error: Exception, url: str, wait_s: float, deadline: float) -> None:
    """Return if waiting on may help; otherwise the one line that says what to do."""
    if isinstance(error, redis.AuthenticationError):
        raise StartupError(
            f"Redis refused the credentials in OCTR_REDIS_URL ({error}); fix the password"
        ) from None
    if isinstance(error, NoPermissionError):  # its ACL rules: no wait helps
        raise StartupError(str(error)) from None
    if not redis_away(error):
        raise error
    if time.monotonic() >= deadline:
        raise StartupError(
            f"Redis at {redis_address(url)} (OCTR_REDIS_URL) did not answer within {wait_s:g}s "
            f"(OCTR_REDIS_WAIT_S; {type(error).__name__}); start it, fix OCTR_REDIS_URL or "
            "raise OCTR_REDIS_WAIT_S"
        ) from None


def prepare_before_serving(settings: Settings) -> None:
    """Wait for Redis and take every startup step that talks to it
    (:func:`~online_ctr.wiring.prepare_redis`) before the API or ``serve`` starts anything: a model
    stored with other settings is then one line, not a traceback from uvicorn's lifespan.
    Ctrl-C while waiting exits quietly with status 130, as a shell expects."""

    async def prepare() -> None:
        client = redis_client(settings)
        try:
            await on_redis(settings, lambda: prepare_redis(settings, client))
        finally:
            await client.aclose()

    try:
        asyncio.run(prepare())
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def redis_address(url: str) -> str:
    """Host and port (or socket path) of a Redis URL, without its password."""
    kwargs = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def fd_budget(max_connections: int) -> int:
    """File descriptors an API may need at ``OCTR_MAX_CONNECTIONS``: per connection its socket,
    a Redis connection for the request on it (redis-py's pool grows to the requests in
    progress) and one refused past the limit while it closes; and :data:`FD_RESERVE`."""
    return 3 * max_connections + FD_RESERVE


def raise_fd_limit(settings: Settings) -> Settings:
    """Raise this process's soft limit on open files to its hard limit (children inherit it).
    If ``OCTR_MAX_CONNECTIONS`` still does not fit (past the limit the server could accept no
    connection, and every request would fail): refuse to start when it was set, and lower it,
    with a warning, when it is the default (a machine whose hard limit is 1,024 still serves
    out of the box). The settings to serve with."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _FD_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as error:  # a hard limit the system caps lower
            logger.warning("could not raise the open-file limit to %d: %s", wanted, error)
    needed = fd_budget(settings.max_connections)
    if soft != resource.RLIM_INFINITY and soft < needed:
        fits = max(1, (soft - FD_RESERVE) // 3)
        if "max_connections" not in settings.model_fields_set:
            logger.warning(
                "the open-file limit (%d) fits %d connections, not the default %d: serving "
                "at most %d (raise the hard limit, ulimit -Hn, for more)",
                soft,
                fits,
                settings.max_connections,
                fits,
            )
            return settings.model_copy(update={"max_connections": fits})
        raise StartupError(
            f"OCTR_MAX_CONNECTIONS={settings.max_connections} needs {needed} open files (3 per "
            f"connection, and {FD_RESERVE}), but the limit is {soft} "
            f"(ulimit -n, hard limit {hard}); set OCTR_MAX_CONNECTIONS to at most {fits} or "
            "raise the hard limit (ulimit -Hn, systemd LimitNOFILE=, docker --ulimit nofile=)"
        )
    return settings
