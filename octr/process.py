"""What every online-ctr process does first: configure logging and read the settings, turning a
bad configuration into one line on stderr and exit status 2 instead of a traceback."""

from __future__ import annotations

import logging
import sys

from octr.settings import Settings, get_settings


def configure_logging() -> None:
    """One log format for the API, the worker and ``serve``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")


def settings_or_exit() -> Settings:
    """The settings, or a clear message and exit status 2 if they are invalid."""
    try:
        return get_settings()
    except ValueError as error:
        print(f"online-ctr: invalid configuration: {error}", file=sys.stderr)
        raise SystemExit(2) from error
