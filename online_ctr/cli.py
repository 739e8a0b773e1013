"""The ``online-ctr`` command: one sub-command per module, each with a ``register`` function.

Sub-command modules are imported when the command runs, never at import time, and the service
ones only if the service is installed alongside the core.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

#: Modules that each define ``register(subparsers)``; the parser they add sets ``func``.
COMMAND_MODULES = (
    "online_ctr.commands.replay",
    "online_ctr.commands.train_batch",
    "service.commands",
    "service.models_command",
    "service.snapshot_command",
    "service.status",
    "workers.commands",
)


def package_version() -> str:
    """The installed package's version (from its metadata), or ``unknown``."""
    try:
        return version("online-ctr")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="online-ctr", description="Streaming online learning for CTR prediction."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
