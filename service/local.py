"""What ``online-ctr serve`` keeps in its data directory: the lock that makes one ``serve`` its
only owner, and generated secrets (the embedded Redis's password, a local API key), each in a
file only its owner may read, created once and reused across restarts."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from pathlib import Path

from octr.process import StartupError

LOCK_FILE = "serve.lock"
REDIS_PASSWORD_FILE = "redis-password"
API_KEYS_FILE = "api-keys"
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
