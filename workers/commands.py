"""The ``online-ctr worker`` sub-command."""

from __future__ import annotations

import argparse
from typing import Any

from octr.process import configure_logging, settings_or_exit


def register(subparsers: Any) -> None:
    """Add ``worker`` to the ``online-ctr`` command line."""
    text = "run a learning worker (needs OCTR_REDIS_URL)"
    parser = subparsers.add_parser("worker", help=text, description=text)
    parser.set_defaults(func=worker)


def worker(args: argparse.Namespace) -> int:
    """Run one learning worker until SIGTERM/SIGINT."""
    from workers.main import main

    configure_logging()
    return main(settings_or_exit())
