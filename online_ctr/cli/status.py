"""``online-ctr status``: where the ``serve`` of a data directory runs, and whether each part
answers: the API, its Redis (without the password) and the workers' /metrics.

It reads what ``serve`` records in the directory (``serve.json``, and the pid in the lock file)
and asks each part once, with a one-second timeout. Once that serve has stopped, what answers
at its parts' addresses is someone else's (another checkout's serve on the same default ports):
it is said so, never reported as this directory's. Exit status 0 when serve runs and
everything answers, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from online_ctr.cli.local import REDIS_PASSWORD_FILE, load_record, lock_holder
from online_ctr.config.tls import TlsFiles
from online_ctr.process import settings_or_exit
from online_ctr.store.tls_probe import tls_trouble

TIMEOUT_S = 1.0


def register(subparsers: Any) -> None:
    """Add ``status`` to the ``online-ctr`` command line."""
    text = "print where the serve of a data directory runs and whether each part answers"
    parser = subparsers.add_parser("status", help=text, description=text)
    parser.add_argument("--data-dir", type=Path, help="the data directory; overrides OCTR_DATA_DIR")
    parser.set_defaults(func=status)


def http_answers(url: str) -> bool:
    """Whether ``url`` answers 200 within the timeout."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def redis_answers(url: str, password: str | None, tls: TlsFiles | None = None) -> str:
    """How Redis at ``url`` answers PING: ``answers``, ``answers (needs a password)`` or not,
    and why not when TLS is the trouble (a ``rediss://`` URL is spoken to with ``tls``)."""
    files = tls or TlsFiles()
    options = files.redis_options() if urlsplit(url).scheme == "rediss" else {}
    client = redis.Redis.from_url(
        url,
        password=password,
        socket_timeout=TIMEOUT_S,
        socket_connect_timeout=TIMEOUT_S,
        **options,
    )
    try:
        client.ping()
        return "answers"
    except redis.AuthenticationError:
        return "answers (needs a password)"
    except (redis.RedisError, OSError):
        trouble = tls_trouble(url, files, TIMEOUT_S, "serve.json")
        return "does not answer" + ("" if trouble is None else f": {trouble}")
    finally:
        client.close()


def _password(data_dir: Path, record: dict[str, Any]) -> str | None:
    if not record.get("embedded_redis"):
        return None
    try:
        return (data_dir / REDIS_PASSWORD_FILE).read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return None


def report(data_dir: Path, tls: TlsFiles | None = None) -> tuple[list[tuple[str, str]], bool]:
    """The status lines (label, text), and whether everything runs and answers (Redis over
    TLS with ``tls``, the ``OCTR_REDIS_TLS_*`` settings, for a ``rediss://`` URL)."""
    locked, pid = lock_holder(data_dir)
    record = load_record(data_dir)
    lines = [("data directory", str(data_dir.resolve()))]
    if record is None:
        lines.append(("serve", "nothing recorded: no `online-ctr serve` has run here"))
        return lines, False
    pid = pid if locked else str(record.get("pid"))
    alive = locked or _alive(record.get("pid"))
    lines.append(("serve", f"pid {pid}, " + ("running" if alive else "not running")))
    if not alive:
        return lines + _stopped(data_dir, record), False
    checks = [("API", record["api_url"], http_answers(record["api_url"] + "/healthz"))]
    checks += [("worker metrics", url, http_answers(url)) for url in record["worker_metrics_urls"]]
    answer = redis_answers(record["redis_url"], _password(data_dir, record), tls)
    where = "embedded" if record.get("embedded_redis") else "external"
    lines.append(("Redis", f"{record['redis_url']} ({where}): {answer}"))
    for label, url, ok in checks:
        lines.append((label, f"{url}: {'answers' if ok else 'does not answer'}"))
    # An external Redis may want a password status does not have: answering is enough.
    healthy = alive and answer.startswith("answers") and all(ok for _, _, ok in checks)
    return lines, healthy


def _stopped(data_dir: Path, record: dict[str, Any]) -> list[tuple[str, str]]:
    """The parts of a serve that stopped. Its API, workers and embedded Redis stopped with it:
    whatever answers at their addresses now is another service (another checkout's, on the
    same default ports), not this directory's, and is not reported as this one's."""
    lines = []
    if record.get("embedded_redis"):
        taken = redis_answers(record["redis_url"], None) != "does not answer"
        lines.append(("Redis", f"{record['redis_url']} (embedded): {_gone(taken)}"))
    else:  # the external Redis is this directory's whether serve runs or not
        answer = redis_answers(record["redis_url"], None)
        lines.append(("Redis", f"{record['redis_url']} (external): {answer}"))
    api = record["api_url"]
    lines.append(("API", f"{api}: {_gone(http_answers(api + '/healthz'))}"))
    for url in record["worker_metrics_urls"]:
        lines.append(("worker metrics", f"{url}: {_gone(http_answers(url))}"))
    return lines


def _gone(taken: bool) -> str:
    """What a stopped serve's part is, and whether another process answers at its address."""
    if taken:
        return "stopped with serve; another process answers there, not this directory's serve"
    return "stopped with serve, does not answer"


def _alive(pid: object) -> bool:
    try:
        os.kill(int(str(pid)), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def status(args: argparse.Namespace) -> int:
    """Print the status of the data directory's serve; 0 if everything answers."""
    settings = settings_or_exit()
    lines, healthy = report(args.data_dir or settings.data_dir, settings.tls_files())
    width = max(len(label) for label, _ in lines)
    for label, text in lines:
        print(f"{label:<{width}}  {text}")
    return 0 if healthy else 1
