"""What every online-ctr process does first: configure logging and read the settings, turning a
bad configuration into one line on stderr and a non-zero exit status instead of a traceback."""

from __future__ import annotations

import gc
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from online_ctr.config.settings import Settings, get_settings

#: Settings read from an environment variable other than ``OCTR_<FIELD>``.
_VARIABLES = {"redis_url": "OCTR_REDIS_URL"}


class StartupError(SystemExit):
    """A problem that stops a process from starting: Python prints the one-line message on
    stderr (no traceback) and exits with status 1, wherever it is raised."""

    def __init__(self, message: str) -> None:
        super().__init__(f"online-ctr: {message}")


def configure_logging(level: str = "info") -> None:
    """One log format for the API, the worker and ``serve``, at ``level`` (OCTR_LOG_LEVEL)."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


#: Container objects allocated (net of those freed) between two collections of the young
#: generation in a serving process. At CPython's default, 700, it ran every few single
#: ``/predict`` requests, and a lone one took ~15 us longer at the median: 1.48x the bare
#: endpoint's p50 against 1.41x at 10,000, the bare endpoint set up alike (paired blocks,
#: 200,000 rows learned, rows not seen before; 5,000 to 50,000 all did as well). A request's
#: objects are freed by their reference counts; the collector is for cycles, which then wait
#: a little longer (a few MB at most).
YOUNG_COLLECTION_EVERY = 10_000


def tune_collector() -> None:
    """Set the garbage collector up for a long-running serving process, once started up.

    Every object alive now is taken out of the collector's sight, for good: a long-running
    process is ~170k container objects from start-up (modules, classes, functions) that never
    become garbage, yet every full collection traversed them all: on this 2-core machine 120
    ms each, every few seconds under ``/predict`` load, which was the API's p99 latency
    (``gc.freeze``, as CPython's documentation suggests for servers). And the young
    generation is collected every :data:`YOUNG_COLLECTION_EVERY` allocations. Call it once,
    after the imports and before serving."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, older, oldest)


def variable(field: str) -> str:
    """The environment variable of a settings field: ``alpha`` -> ``OCTR_ALPHA``."""
    return _VARIABLES.get(field, f"OCTR_{field.upper()}")


def _one(error: Mapping[str, Any], flags: Mapping[str, str]) -> str:
    loc: Sequence[str | int] = error["loc"]
    message = str(error["msg"]).removeprefix("Value error, ")
    if not loc:  # a check across settings: its message names the variables itself
        return message
    name = str(loc[0])
    name = name if name.startswith(("OCTR_", "REDIS_")) else variable(name)
    if name in flags:  # the value came from a flag, which overrides the variable
        name = f"{flags[name]} ({name})"
    got = error.get("input")
    quiet = not isinstance(got, str) or "got " in message or repr(got) in message
    shown = "" if quiet else f" (got {got!r})"
    return f"{name}: {message[:1].lower()}{message[1:]}{shown}"


def describe_settings_error(error: ValidationError, flags: Mapping[str, str] | None = None) -> str:
    """A pydantic settings error as one line naming the environment variables, and the flag
    of each variable in ``flags`` (variable -> flag: the flags given on the command line)."""
    given = flags or {}
    errors = error.errors(include_url=False)
    return "invalid configuration: " + "; ".join(_one(e, given) for e in errors)


def settings_or_exit() -> Settings:
    """The settings, or one clear line and a non-zero exit status if they are invalid."""
    try:
        return get_settings()
    except ValidationError as error:
        raise StartupError(describe_settings_error(error)) from None
