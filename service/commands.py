"""The service's sub-commands: ``api`` and the all-in-one ``serve``.

Configuration comes from the environment (``OCTR_*``, see :mod:`octr.settings`), read once.
``serve`` runs the API and one worker as child processes, like a deployment would, plus an
embedded Redis when no ``OCTR_REDIS_URL``/``REDIS_URL`` is set; Ctrl-C stops all of them.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Any

from octr.process import configure_logging, settings_or_exit

logger = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add ``serve`` and ``api`` to the ``online-ctr`` command line."""
    for name, func, text in (
        ("serve", serve, "run Redis (embedded unless OCTR_REDIS_URL is set), the API and a worker"),
        ("api", api, "run the HTTP API (needs OCTR_REDIS_URL)"),
    ):
        parser = subparsers.add_parser(name, help=text, description=text)
        parser.set_defaults(func=func)


def api(args: argparse.Namespace) -> int:
    """Serve the API with uvicorn until stopped."""
    import uvicorn

    from service.app import create_app

    configure_logging()
    settings = settings_or_exit()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, access_log=False)
    return 0


def serve(args: argparse.Namespace) -> int:
    """Run everything on one machine; returns when interrupted or when a child dies."""
    from service.embedded import RedisServer

    configure_logging()
    settings = settings_or_exit()
    env = dict(os.environ)
    redis = None
    if settings.redis_url is None:
        redis = RedisServer(settings.data_dir / "redis").start()
        env["OCTR_REDIS_URL"] = redis.url
        logger.info("embedded Redis at %s (data in %s)", redis.url, redis.data_dir)
    children = [_spawn("service", env), _spawn("workers", env)]
    logger.info("API on http://%s:%d (docs at /docs)", settings.host, settings.port)
    try:
        _wait(children)
    finally:
        _stop(children)
        if redis is not None:
            redis.stop()
    return 0


def _spawn(module: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``python -m module`` (the API is ``service``, a worker ``workers``)."""
    # start_new_session: Ctrl-C reaches only us, so children stop in order (API, worker, Redis).
    return subprocess.Popen([sys.executable, "-m", module], env=env, start_new_session=True)


def _wait(children: list[subprocess.Popen[bytes]]) -> None:
    """Block until SIGINT/SIGTERM or until a child exits."""
    stopping = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    while not stopping:
        for child in children:
            if child.poll() is not None:
                logger.error("%s exited with status %s; stopping", child.args, child.returncode)
                return
        time.sleep(0.2)
    logger.info("stopping")


def _stop(children: list[subprocess.Popen[bytes]], timeout_s: float = 15.0) -> None:
    """SIGTERM every child (the worker drains its batch), then wait; SIGKILL stragglers."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + timeout_s
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
