"""The service's sub-commands: ``api`` and the all-in-one ``serve`` (:mod:`service.serve`).

Configuration comes from the environment (``OCTR_*``, see :mod:`octr.settings`), read once.
A configuration or environment that cannot work (invalid settings, a port in use, no Redis)
stops the command with one line on stderr and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from octr.process import configure_logging, settings_or_exit
from octr.startup import check_port

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

    from service.api.auth import describe
    from service.app import create_app

    settings = settings_or_exit()
    app = create_app(settings)
    check_port(settings.host, settings.port, "OCTR_PORT")
    configure_logging()
    logger.info("%s", describe(settings))
    uvicorn.run(app, host=settings.host, port=settings.port, access_log=False)
    return 0


def serve(args: argparse.Namespace) -> int:
    """Run everything on one machine; returns when interrupted or when a child dies."""
    from service.serve import serve as run

    settings = settings_or_exit()
    configure_logging()
    return run(settings)
