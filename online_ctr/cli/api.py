"""The service's sub-commands: ``api`` and the all-in-one ``serve`` (:mod:`online_ctr.cli.serve`).

Configuration comes from the environment (``OCTR_*``, see :mod:`online_ctr.config.settings`) with
the flags overriding it (:mod:`online_ctr.cli.flags`), read once. A configuration or environment
that cannot work (invalid settings, a port in use, no Redis, too low an open-file limit) stops the
command with one line on stderr and a non-zero exit status. Like the worker, both wait up to
``OCTR_REDIS_WAIT_S`` for a Redis that is not up yet (:func:`online_ctr.startup.on_redis`).
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from online_ctr.cli.flags import add_parser, settings_from_args
from online_ctr.process import StartupError, configure_logging
from online_ctr.startup import check_port, prepare_before_serving, raise_fd_limit

logger = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    """Add ``serve`` and ``api`` to the ``online-ctr`` command line."""
    for name, func, text in (
        ("serve", serve, "run Redis (embedded unless OCTR_REDIS_URL is set), the API and workers"),
        ("api", api, "run the HTTP API (needs OCTR_REDIS_URL)"),
    ):
        add_parser(subparsers, name, text).set_defaults(func=func)


def api(args: argparse.Namespace) -> int:
    """Serve the API with uvicorn until stopped."""
    import uvicorn

    from service.api.auth import describe
    from service.app import create_app
    from service.connections import bounded_protocol

    settings = settings_from_args(args, "api")
    if args.workers is not None and settings.workers != 1:  # OCTR_WORKERS is serve's
        # One process per container: the metrics and the coalescing are per process.
        raise StartupError(
            f"--workers is {settings.workers}, but the API runs in one process; "
            "run more `online-ctr api` behind a load balancer"
        )
    configure_logging(settings.log_level)
    settings = raise_fd_limit(settings)
    app = create_app(settings, freeze_gc=True)
    check_port(settings.host, settings.port, "OCTR_PORT", "--port")
    # Before uvicorn: a refusal there would be a traceback of its lifespan, not one line.
    prepare_before_serving(settings)
    logger.info("%s", describe(settings))
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_level=settings.log_level,
        # httptools, as uvicorn's "auto" picks, with the connection bounds it lacks.
        http=bounded_protocol(settings, app.state.metrics, app.state.requests),
    )
    return 0


def serve(args: argparse.Namespace) -> int:
    """Run everything on one machine; returns when interrupted or when a child dies."""
    from online_ctr.cli.serve import serve as run

    settings = settings_from_args(args, "serve")
    configure_logging(settings.log_level)
    return run(settings)
