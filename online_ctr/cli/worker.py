"""The ``online-ctr worker`` sub-command."""

from __future__ import annotations

import argparse
from typing import Any

from online_ctr.cli.flags import add_parser, settings_from_args
from online_ctr.process import StartupError, configure_logging


def register(subparsers: Any) -> None:
    """Add ``worker`` to the ``online-ctr`` command line."""
    text = "run a learning worker (needs OCTR_REDIS_URL); --host/--port: its /metrics"
    add_parser(subparsers, "worker", text).set_defaults(func=worker)


def worker(args: argparse.Namespace) -> int:
    """Run one learning worker until SIGTERM/SIGINT."""
    from workers.main import main

    settings = settings_from_args(args, "worker")
    if args.workers is not None and settings.workers != 1:  # OCTR_WORKERS is serve's
        raise StartupError(
            f"--workers is {settings.workers}, but a worker is one process; "
            "run more `online-ctr worker` (one learns a model, the others stand by)"
        )
    configure_logging(settings.log_level)
    return main(settings)
