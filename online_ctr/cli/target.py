"""Which Redis an admin command (``models``, ``export``, ``import``) talks to, and what to say
when it cannot.

A URL given (``--redis-url``, ``OCTR_REDIS_URL``) is used as it is. Without one, the command
finds the local service by itself: the Redis URL that ``online-ctr serve`` recorded in the
data directory's ``serve.json``, with the password of the directory's password file, so that
an admin on the machine needs neither the URL nor the password pieced together.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from pydantic import ValidationError

from online_ctr.cli.local import RECORD_FILE, REDIS_PASSWORD_FILE, load_record, without_password
from online_ctr.config.settings import Settings
from online_ctr.process import StartupError, describe_settings_error
from online_ctr.store.tls_probe import tls_trouble

URL_VARIABLE = "OCTR_REDIS_URL"
PASSWORD_VARIABLE = "OCTR_REDIS_PASSWORD_FILE"


@dataclass(frozen=True)
class Target:
    """The settings of a command, and where its Redis URL came from (for its errors)."""

    settings: Settings
    #: ``OCTR_REDIS_URL``, ``--redis-url`` or the path of the ``serve.json`` it was read from.
    source: str

    def failure(self, error: Exception) -> StartupError:
        """The one line that says what went wrong with Redis, and which setting to change."""
        url = str(self.settings.redis_url)
        where = f"Redis at {without_password(url)} ({self.source})"
        if isinstance(error, redis.AuthenticationError):
            return StartupError(_auth_advice(where, url, error, self.settings.data_dir))
        if isinstance(error, (redis.ConnectionError, redis.TimeoutError, OSError)):
            settings = self.settings
            trouble = tls_trouble(url, settings.tls_files(), settings.redis_timeout_s, self.source)
            if trouble is not None:
                return StartupError(trouble)
        hint = ""
        if self.source.endswith(RECORD_FILE):
            hint = "; is its `online-ctr serve` running? (`online-ctr status` tells)"
        return StartupError(f"Redis error: {error} ({where}){hint}")


def _auth_advice(where: str, url: str, error: Exception, data_dir: Path) -> str:
    local = data_dir / REDIS_PASSWORD_FILE
    hint = f" (the local serve's is {local})" if local.is_file() else ""
    if urlsplit(url).password is None:
        return (
            f"{where} wants a password: set {PASSWORD_VARIABLE} to the file holding it{hint}, "
            f"or unset {URL_VARIABLE} to use the local serve's"
        )
    return f"{where} refused the password ({error}): fix {PASSWORD_VARIABLE}{hint}"


def _settings(overrides: dict[str, Any], named: dict[str, str]) -> Settings:
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise StartupError(describe_settings_error(error, named)) from None


def admin_target(redis_url: str | None = None) -> Target:
    """The Redis of ``redis_url`` (a ``--redis-url``), of ``OCTR_REDIS_URL``, or else of the
    ``serve`` recorded in ``OCTR_DATA_DIR``; one line if there is none."""
    flag = {} if redis_url is None else {URL_VARIABLE: redis_url}
    settings = _settings(flag, {URL_VARIABLE: "--redis-url"} if flag else {})
    if settings.redis_url is not None:
        return Target(settings, "--redis-url" if flag else URL_VARIABLE)
    record_path = settings.data_dir / RECORD_FILE
    record = load_record(settings.data_dir)
    if record is None:
        raise StartupError(
            f"no Redis: set {URL_VARIABLE} (and {PASSWORD_VARIABLE} if it needs a password), "
            f"or run `online-ctr serve` (nothing recorded in {record_path}; OCTR_DATA_DIR)"
        )
    overrides: dict[str, Any] = {URL_VARIABLE: record["redis_url"]}
    password = settings.data_dir / REDIS_PASSWORD_FILE
    if record.get("embedded_redis") and password.is_file():
        overrides["redis_password_file"] = password
    return Target(_settings(overrides, {}), str(record_path))
