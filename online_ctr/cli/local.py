"""What ``online-ctr serve`` keeps in its data directory: the lock that makes one ``serve`` its
only owner, and generated secrets (the embedded Redis's password, a local API key), each in a
file only its owner may read, created once and reused across restarts."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from online_ctr.process import StartupError

LOCK_FILE = "serve.lock"
REDIS_PASSWORD_FILE = "redis-password"
API_KEYS_FILE = "api-keys"
#: Where ``serve`` runs everything (``online-ctr status`` reads it); no secret in it.
RECORD_FILE = "serve.json"
#: The scopes of the key ``serve`` generates for local use.
LOCAL_SCOPES = "predict,learn,admin"


def lock_data_dir(data_dir: Path) -> int:
    """Lock ``data_dir`` for this process; the descriptor, which must stay open.

    An ``fcntl`` lock rather than a pid file: the OS releases it when its holders die, so a
    crashed ``serve`` never leaves a stale lock behind.
    """
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise StartupError(
            f"the data directory {data_dir} (OCTR_DATA_DIR) is in use by another "
            f"`online-ctr serve` (pid {holder}, or its embedded redis-server); stop it, "
            "or set OCTR_DATA_DIR to another directory"
        ) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    return descriptor


def secret_file(path: Path, make: str) -> str:
    """The first line of ``path``, created as ``make`` with mode 0600 if it does not exist."""
    with contextlib.suppress(FileExistsError):
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(make + "\n")
    if path.stat().st_mode & 0o077:
        raise StartupError(f"{path} is readable by other users; run `chmod 600 {path}`")
    return path.read_text().splitlines()[0].strip()


def redis_password(data_dir: Path) -> str:
    """The embedded Redis's password (hex, so it fits a URL unescaped)."""
    return secret_file(data_dir / REDIS_PASSWORD_FILE, secrets.token_hex(32))


def local_api_keys(data_dir: Path) -> Path:
    """A keys file with one key of every scope, for a ``serve`` that was given no keys."""
    path = data_dir / API_KEYS_FILE
    secret_file(path, f"{secrets.token_urlsafe(32)} {LOCAL_SCOPES}")
    return path


def without_password(url: str) -> str:
    """A Redis URL with its password removed, fit to print.

    >>> without_password("redis://:s3cret@127.0.0.1:6380/0")
    'redis://127.0.0.1:6380/0'
    """
    parts = urlsplit(url)
    user = parts.username or ""
    netloc = f"{user}@{parts.hostname}" if user else str(parts.hostname)
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)) if parts.hostname else url


def save_record(data_dir: Path, record: dict[str, Any]) -> None:
    """Write ``record`` (its Redis URL without the password) as the directory's record."""
    public = {**record, "redis_url": without_password(str(record["redis_url"]))}
    path = data_dir / RECORD_FILE
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(public, indent=2) + "\n")
    temporary.replace(path)  # atomically: status never reads half a record


def load_record(data_dir: Path) -> dict[str, Any] | None:
    """The record ``serve`` last wrote in ``data_dir``, or None."""
    try:
        loaded: dict[str, Any] = json.loads((data_dir / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return None
    return loaded


def lock_holder(data_dir: Path) -> tuple[bool, str | None]:
    """Whether ``data_dir`` is locked by a running ``serve`` (or its Redis), and the pid
    written in the lock file."""
    path = data_dir / LOCK_FILE
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return False, None
    try:
        pid = os.pread(descriptor, 64, 0).decode(errors="replace").strip() or None
        try:
            # Taken and at once released: a serve starting in this instant could be refused.
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True, pid
        return False, pid
    finally:
        os.close(descriptor)  # closing releases a lock taken here
