"""The ``online-ctr worker`` process: wiring, signals and the metrics endpoint."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket

from prometheus_client import start_http_server
from redis.exceptions import RedisError

from octr.metrics import Metrics
from octr.process import StartupError
from octr.settings import Settings
from octr.startup import check_port, wait_for_redis
from octr.store.state import ModelMismatchError, ModelStore
from octr.wiring import check_topology, join_policy, model_spec, redis_client
from online_ctr.sequential import warm_up
from workers.consumer import Worker, WorkerConfig

logger = logging.getLogger(__name__)


def worker_config(settings: Settings) -> WorkerConfig:
    """The worker's grouping, lease, cache and dead-letter settings."""
    return WorkerConfig(
        name=settings.worker_name or f"{socket.gethostname()}-{os.getpid()}",
        batch_size=settings.batch_size,
        batch_wait_ms=settings.batch_wait_ms,
        lease_ttl_ms=settings.lease_ttl_ms,
        max_deliveries=settings.max_deliveries,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        # Ten times what readiness tolerates: only names long dead are forgotten.
        forget_workers_after_s=10 * settings.ready_max_heartbeat_age_s,
        cache_features=settings.worker_cache_features,
    )


async def _ensure_model(store: ModelStore, worker: Worker, retry_s: float) -> bool:
    """Create or check the model, waiting for Redis if it is not up yet; False if the
    worker was stopped while waiting."""
    while not worker.stopping:
        try:
            await store.ensure()
            return True
        except (RedisError, OSError) as error:
            logger.warning("waiting for redis: %s", error)
            await asyncio.sleep(retry_s)
    return False


async def run_worker(settings: Settings, metrics: Metrics) -> None:
    """Run one worker until SIGTERM or SIGINT, then finish the group in flight and exit."""
    await check_topology(settings)
    client = redis_client(settings)
    store = ModelStore(client, model_spec(settings))
    worker = Worker(store, worker_config(settings), metrics, join_policy(settings))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stop)
    warm_up(store.spec.rule, store.spec.params)  # compile before leading, not on the clock
    try:
        if await _ensure_model_or_exit(store, worker, settings.retry_after_s):
            logger.info("worker %s learning model %r", worker.config.name, settings.model)
            await worker.run()
    except ModelMismatchError as error:  # the model was created again, otherwise, meanwhile
        raise StartupError(str(error)) from None
    finally:
        await client.aclose()
    logger.info("worker %s stopped", worker.config.name)


async def _ensure_model_or_exit(store: ModelStore, worker: Worker, retry_s: float) -> bool:
    try:
        return await _ensure_model(store, worker, retry_s)
    except ModelMismatchError as error:
        raise StartupError(str(error)) from None


def main(settings: Settings) -> int:
    """Entry point of ``online-ctr worker``."""
    metrics = Metrics()
    host, port = settings.worker_metrics_host, settings.worker_metrics_port
    check_port(host, port, "OCTR_WORKER_METRICS_PORT", "worker --port")
    if settings.redis_url:
        wait_for_redis(settings.redis_url, settings.redis_wait_s, settings.redis_timeout_s)
    if port:
        start_http_server(port, addr=host)
    asyncio.run(run_worker(settings, metrics))
    return 0
