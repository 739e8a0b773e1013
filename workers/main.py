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
from octr.settings import Settings
from octr.store.state import ModelStore
from octr.wiring import model_spec, redis_client
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
    """Run one worker until SIGTERM or SIGINT, then finish the batch in flight and exit."""
    client = redis_client(settings)
    store = ModelStore(client, model_spec(settings))
    worker = Worker(store, worker_config(settings), metrics)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stop)
    try:
        if await _ensure_model(store, worker, settings.retry_after_s):
            logger.info("worker %s learning model %r", worker.config.name, settings.model)
            await worker.run()
    finally:
        await client.aclose()
    logger.info("worker %s stopped", worker.config.name)


def main(settings: Settings) -> int:
    """Entry point of ``online-ctr worker``."""
    metrics = Metrics()
    if settings.worker_metrics_port:
        start_http_server(settings.worker_metrics_port, addr=settings.host)
    asyncio.run(run_worker(settings, metrics))
    return 0
