"""The service's sub-commands: ``api``, ``worker`` and the all-in-one ``serve``.

Configuration comes from the environment (``OCTR_*``, see :mod:`service.settings`), read once.
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

from service.settings import Settings, get_settings

logger = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add ``serve``, ``api`` and ``worker`` to the ``online-ctr`` command line."""
    for name, func, text in (
        ("serve", serve, "run Redis (embedded unless OCTR_REDIS_URL is set), the API and a worker"),
        ("api", api, "run the HTTP API (needs OCTR_REDIS_URL)"),
        ("worker", worker, "run a learning worker (needs OCTR_REDIS_URL)"),
    ):
        parser = subparsers.add_parser(name, help=text, description=text)
        parser.set_defaults(func=func)


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def api(args: argparse.Namespace) -> int:
    """Serve the API with uvicorn until stopped."""
    import uvicorn

    from service.app import create_app

    _configure_logging()
    settings = settings_or_exit()
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, access_log=False)
    return 0


def worker(args: argparse.Namespace) -> int:
    """Run one learning worker until SIGTERM/SIGINT."""
    from workers.main import main

    _configure_logging()
    return main(settings_or_exit())


def serve(args: argparse.Namespace) -> int:
    """Run everything on one machine; returns when interrupted or when a child dies."""
    from service.embedded import RedisServer

    _configure_logging()
    settings = settings_or_exit()
    env = dict(os.environ)
    redis = None
    if settings.redis_url is None:
        redis = RedisServer(settings.data_dir / "redis").start()
        env["OCTR_REDIS_URL"] = redis.url
        logger.info("embedded Redis at %s (data in %s)", redis.url, redis.data_dir)
    children = [_spawn("api", env), _spawn("worker", env)]
    logger.info("API on http://%s:%d (docs at /docs)", settings.host, settings.port)
    try:
        _wait(children)
    finally:
        _stop(children)
        if redis is not None:
            redis.stop()
    return 0


def _spawn(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    # start_new_session: Ctrl-C reaches only us, so children stop in order (API, worker, Redis).
    return subprocess.Popen(
        [sys.executable, "-m", "online_ctr.cli", command], env=env, start_new_session=True
    )


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


def settings_or_exit() -> Settings:
    """The settings, or a clear message and exit status 2 if they are invalid."""
    try:
        return get_settings()
    except ValueError as error:
        print(f"online-ctr: invalid configuration: {error}", file=sys.stderr)
        raise SystemExit(2) from error
