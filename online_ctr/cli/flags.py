"""The flags of ``serve``, ``api`` and ``worker``: each overrides one ``OCTR_*`` variable.

The settings are built once, from the environment with the flags given as overrides, so a bad
flag is refused like a bad variable: one line naming both (``--port (OCTR_PORT): ...``). The
``--help`` of each command lists its flags with their variables, then every other variable,
generated from :class:`online_ctr.config.settings.Settings` (its fields' defaults and descriptions).
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ValidationError

from online_ctr.config.settings import Settings
from online_ctr.process import StartupError, describe_settings_error, variable

#: Every command's flags: flag -> the settings field it overrides. A worker's address is
#: where it serves its /metrics.
_ADDRESS = {
    "serve": {"--host": "host", "--port": "port"},
    "api": {"--host": "host", "--port": "port"},
    "worker": {"--host": "worker_metrics_host", "--port": "worker_metrics_port"},
}
_COMMON = {
    "--redis-url": "redis_url",
    "--data-dir": "data_dir",
    "--workers": "workers",
    "--log-level": "log_level",
}
#: What a flag means for a command, where the field's own description says something else.
_MEANING = {
    ("api", "workers"): "API processes: must be 1 (run more `online-ctr api` behind a balancer)",
    ("worker", "workers"): "worker processes: must be 1 (run more `online-ctr worker`)",
}


def command_flags(command: str) -> dict[str, str]:
    """The flags of ``command`` (``serve``, ``api`` or ``worker``): flag -> settings field."""
    return {**_ADDRESS[command], **_COMMON}


def _default(field: str) -> str:
    value = Settings.model_fields[field].default
    return (
        "unset" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )


def _help(command: str, field: str) -> str:
    info = Settings.model_fields[field]
    text = _MEANING.get((command, field)) or (info.description or "").rstrip(".")
    default = _default(field)
    # argparse %-formats help strings.
    return f"{text}; overrides {variable(field)} (default: {default})".replace("%", "%%")


def environment_epilog(command: str) -> str:
    """The ``OCTR_*`` variables no flag of ``command`` overrides, with defaults and meaning."""
    flagged = set(command_flags(command).values())
    lines = ["other settings, from the environment:"]
    for field, info in Settings.model_fields.items():
        if field in flagged:
            continue
        lines.append(f"  {variable(field)}={_default(field)}\n      {info.description or ''}")
    return "\n".join(lines)


def add_parser(subparsers: Any, command: str, text: str) -> argparse.ArgumentParser:
    """Add ``command`` with its flags and an epilog of the other variables."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        command,
        help=text,
        description=f"{text}. Flags override the environment.",
        epilog=environment_epilog(command),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, field in command_flags(command).items():
        metavar = flag.removeprefix("--").replace("-", "_").upper()
        parser.add_argument(flag, dest=field, metavar=metavar, help=_help(command, field))
    return parser


def settings_from_args(args: argparse.Namespace, command: str) -> Settings:
    """The environment's settings with the flags given overriding them; one line if invalid."""
    given = {
        field: value
        for field in command_flags(command).values()
        if (value := getattr(args, field, None)) is not None
    }
    # The Redis URL is read through its aliases, so it is passed by its variable's name.
    overrides = {variable(f) if f == "redis_url" else f: value for f, value in given.items()}
    try:
        return Settings(**overrides)
    except ValidationError as error:
        flags = {variable(field): flag for flag, field in command_flags(command).items()}
        named = {name: flag for name, flag in flags.items() if _field(name) in given}
        raise StartupError(describe_settings_error(error, named)) from None


def _field(name: str) -> str:
    return "redis_url" if name == "OCTR_REDIS_URL" else name.removeprefix("OCTR_").lower()
