"""Checks a process makes before it starts serving, each failing as one :class:`StartupError`
line that names the setting and what to do: a port in use, a Redis that never answers."""

from __future__ import annotations

import errno
import socket
import time

import redis

from octr.process import StartupError


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


def wait_for_redis(url: str, wait_s: float, timeout_s: float) -> None:
    """Return once Redis at ``url`` answers PING; fail after ``wait_s`` without an answer."""
    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                client.ping()
                return
            except redis.AuthenticationError as error:
                raise StartupError(
                    f"Redis refused the credentials in OCTR_REDIS_URL ({error}); fix the password"
                ) from None
            except (redis.RedisError, OSError) as error:
                if time.monotonic() >= deadline:
                    where = redis_address(url)
                    raise StartupError(
                        f"Redis at {where} (OCTR_REDIS_URL) did not answer within {wait_s:g}s "
                        f"({type(error).__name__}); start it or fix OCTR_REDIS_URL"
                    ) from None
            time.sleep(0.2)
    finally:
        client.close()


def redis_address(url: str) -> str:
    """Host and port (or socket path) of a Redis URL, without its password."""
    kwargs = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
