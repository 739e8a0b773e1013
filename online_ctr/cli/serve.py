"""``online-ctr serve``: the API and one worker as child processes, like a deployment would
run them, plus an embedded Redis when no ``OCTR_REDIS_URL``/``REDIS_URL`` is set.

Everything that can be checked is checked before anything starts (ports, the data directory's lock,
a redis-server to run, Redis answering, the model stored as the settings describe it), so a failure
is one line and nothing to clean up. Ctrl-C stops the API and the worker first (the worker finishes
its batch), Redis last: the children run in sessions of their own, so the terminal's SIGINT reaches
only this process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from types import FrameType

from online_ctr.cli.embedded import (
    RedisNotFoundError,
    RedisServer,
    die_with_parent,
    find_redis_server,
)
from online_ctr.cli.local import (
    load_record,
    local_api_keys,
    lock_data_dir,
    lock_holder,
    redis_password,
    save_record,
)
from online_ctr.cli.memory import embedded_maxmemory, memory_limit_text
from online_ctr.config.settings import Settings
from online_ctr.process import StartupError
from online_ctr.startup import check_port, prepare_before_serving
from service.api.auth import describe

logger = logging.getLogger(__name__)

Child = subprocess.Popen[bytes]


def metrics_ports(settings: Settings) -> list[int]:
    """Each worker's /metrics port: OCTR_WORKER_METRICS_PORT and the ones after it (0: off)."""
    base = settings.worker_metrics_port
    return [base + index if base else 0 for index in range(settings.workers)]


def refuse_a_second_serve(settings: Settings) -> None:
    """Fail first if a ``serve`` of this data directory runs already, naming it: the ports it
    holds (the API's, then a worker's) would otherwise be blamed one at a time before it."""
    running, pid = lock_holder(settings.data_dir)
    if not running:
        return
    record = load_record(settings.data_dir) or {}
    where = f", API on {record['api_url']}" if record.get("api_url") else ""
    raise StartupError(
        f"`online-ctr serve` is already running from {settings.data_dir} (OCTR_DATA_DIR; "
        f"pid {pid or 'unknown'}{where}): use it (`online-ctr status` tells where each part "
        "runs), stop it (Ctrl-C in its terminal), or set OCTR_DATA_DIR to another directory"
    )


def check_ports(settings: Settings) -> None:
    """Fail now if the API's or a worker's metrics port is taken."""
    check_port(settings.host, settings.port, "OCTR_PORT", "--port")
    for port in metrics_ports(settings):
        check_port(settings.worker_metrics_host, port, "OCTR_WORKER_METRICS_PORT")


def start_embedded_redis(settings: Settings) -> RedisServer:
    """Lock the data directory and start its Redis, password-protected, with its memory
    limit (OCTR_REDIS_MAXMEMORY, or a share of the machine's memory)."""
    if given := settings.tls_files().given():
        # It listens on loopback only, in plain text: the files would be for nothing.
        raise StartupError(
            f"{', '.join(given)} set, but the embedded Redis speaks no TLS: set "
            "OCTR_REDIS_URL to a rediss:// Redis, or unset them"
        )
    try:
        find_redis_server()
    except RedisNotFoundError as error:
        raise StartupError(str(error)) from None
    lock = lock_data_dir(settings.data_dir)
    # A fixed port, so that clients and `online-ctr status` know where it is; checked after
    # the lock, so that a second serve of this directory is told the directory is in use.
    check_port("127.0.0.1", settings.embedded_redis_port, "OCTR_EMBEDDED_REDIS_PORT")
    # The server inherits the lock: the directory stays locked while it runs. It gets
    # SIGTERM (and saves) if this process dies, even by SIGKILL, so it never outlives serve.
    server = RedisServer(
        settings.data_dir / "redis",
        port=settings.embedded_redis_port,
        password=redis_password(settings.data_dir),
        keep_fds=(lock,),
        die_with_parent=True,
        maxmemory=embedded_maxmemory(settings),
    )
    try:
        server.start()
    except RuntimeError as error:
        raise StartupError(f"the embedded Redis did not start: {error}") from None
    logger.info(
        "embedded Redis on 127.0.0.1:%d (data and password in %s), memory limit %s "
        "(OCTR_REDIS_MAXMEMORY)",
        server.port,
        settings.data_dir,
        memory_limit_text(server.maxmemory),
    )
    return server


def child_environments(
    settings: Settings, redis_url: str
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The API's and each worker's environment (secrets in files or the environment, never
    on a command line); the settings flags overrode are passed on as their variables."""
    api = {
        **os.environ,
        "OCTR_REDIS_URL": redis_url,
        "OCTR_HOST": settings.host,
        "OCTR_PORT": str(settings.port),
        "OCTR_DATA_DIR": str(settings.data_dir),
        "OCTR_LOG_LEVEL": settings.log_level,
    }
    api.pop("OCTR_WORKERS", None)  # serve's own: each child is one process
    if settings.auth == "on" and settings.api_keys is None and settings.api_keys_file is None:
        api["OCTR_API_KEYS_FILE"] = str(local_api_keys(settings.data_dir))
    workers = [{**api, "OCTR_WORKER_METRICS_PORT": str(port)} for port in metrics_ports(settings)]
    return api, workers


def auth_line(settings: Settings, api_env: dict[str, str]) -> str:
    """How the API's keys are set, with how to use a key ``serve`` generated."""
    if settings.auth == "off" or "OCTR_API_KEYS_FILE" not in api_env or settings.api_keys_file:
        return describe(settings)
    path = api_env["OCTR_API_KEYS_FILE"]
    return (
        f"auth: on, a local key of every scope in {path}; send it as "
        f"-H \"Authorization: Bearer $(cut -d' ' -f1 {path})\""
    )


def serve(settings: Settings) -> int:
    """Run Redis (if embedded), the API and the workers until interrupted or a child dies."""
    refuse_a_second_serve(settings)
    check_ports(settings)
    redis = None
    if settings.redis_url is None:
        redis = start_embedded_redis(settings)
        url = redis.url
    else:
        url = settings.redis_url
        if settings.redis_maxmemory is not None:
            # An external Redis's limit is its operator's (its maxmemory setting).
            logger.warning("OCTR_REDIS_MAXMEMORY is ignored: it limits only the embedded Redis")
    try:
        # What the API and the workers would each refuse (a model stored with other
        # settings), refused once here before they start, and Redis waited for as they would.
        prepare_before_serving(settings.model_copy(update={"redis_url": url}))
        api_env, worker_envs = child_environments(settings, url)
        logger.info("%s", auth_line(settings, api_env))
        children = [_spawn("api", api_env), *(_spawn("worker", e) for e in worker_envs)]
        write_record(settings, url, embedded=redis is not None)
        logger.info("API on http://%s:%d (docs at /docs)", settings.host, settings.port)
        try:
            interrupted = _wait(children)
        finally:
            _stop(children)
    finally:
        if redis is not None:
            redis.stop()  # last: the worker has finished its batch
    return 0 if interrupted else 1


def write_record(settings: Settings, redis_url: str, embedded: bool) -> None:
    """Where everything runs, in the data directory, for `online-ctr status`."""
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    metrics_host = settings.worker_metrics_host
    save_record(
        settings.data_dir,
        {
            "pid": os.getpid(),
            "api_url": f"http://{host}:{settings.port}",
            "redis_url": redis_url,
            "embedded_redis": embedded,
            "worker_metrics_urls": [
                f"http://{metrics_host}:{port}/metrics" for port in metrics_ports(settings) if port
            ],
        },
    )


def _spawn(command: str, env: dict[str, str]) -> Child:
    """Start ``online-ctr command`` (``api`` or ``worker``) with this Python."""
    # start_new_session: Ctrl-C reaches only us, so children stop in order (API, worker, Redis);
    # die_with_parent: if serve is killed, they get SIGTERM instead of running on, orphaned.
    return subprocess.Popen(
        [sys.executable, "-m", "online_ctr.cli", command],
        env=env,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )


def _wait(children: list[Child]) -> bool:
    """Block until SIGINT/SIGTERM (True) or until a child exits (False)."""
    stopping = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    while not stopping:
        for child in children:
            if child.poll() is not None:
                logger.error(
                    "child %d exited with status %s; stopping", child.pid, child.returncode
                )
                return False
        time.sleep(0.2)
    logger.info("stopping: the API and the worker first, then Redis")
    return True


def _stop(children: list[Child], timeout_s: float = 15.0) -> None:
    """SIGTERM every child (the worker drains its batch), then wait; SIGKILL stragglers."""
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + timeout_s
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
