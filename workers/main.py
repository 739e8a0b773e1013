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
from octr.process import StartupError, freeze_startup_objects
from octr.redis_types import RedisClient
from octr.settings import Settings
from octr.startup import check_port, wait_for_redis
from octr.store.registry import Registry, RegistryError
from octr.store.state import ModelMismatchError, ModelStore
from octr.wiring import check_topology, model_spec, redis_client
from workers.consumer import WorkerConfig
from workers.fleet import Fleet

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
        auc_window=settings.auc_window,
    )


async def _ensure_own(
    store: ModelStore, registry: Registry, fleet: Fleet, settings: Settings
) -> bool:
    """Create or check the service's own model and record it in the registry, waiting for
    Redis if it is not up yet; False if the worker was stopped while waiting."""
    while not fleet.stopping:
        try:
            await store.ensure()
            await registry.create(settings.model, settings.default_model(), replace=True)
            return True
        except (RedisError, OSError) as error:
            logger.warning("waiting for redis: %s", error)
            await asyncio.sleep(settings.retry_after_s)
    return False


def fleet_of(settings: Settings, client: RedisClient, metrics: Metrics) -> Fleet:
    """The learners of this process, as the settings say."""
    only = frozenset(name.strip() for name in settings.worker_models.split(",") if name.strip())
    return Fleet(
        client,
        Registry(client, settings.max_models),
        worker_config(settings),
        metrics,
        own=settings.model,
        only=only,
        refresh_s=settings.registry_refresh_s,
    )


async def run_worker(settings: Settings, metrics: Metrics) -> None:
    """Run the learners until SIGTERM or SIGINT, then finish the groups in flight and exit."""
    await check_topology(settings)
    client = redis_client(settings)
    fleet = fleet_of(settings, client, metrics)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, fleet.stop)
    store = ModelStore(client, model_spec(settings))
    try:
        if await _ensure_own(store, fleet.registry, fleet, settings):
            await fleet.run()
    except (ModelMismatchError, RegistryError) as error:
        raise StartupError(str(error)) from None
    finally:
        await client.aclose()
    logger.info("worker %s stopped", fleet.config.name)


def main(settings: Settings) -> int:
    """Entry point of ``online-ctr worker``."""
    metrics = Metrics()
    host, port = settings.worker_metrics_host, settings.worker_metrics_port
    check_port(host, port, "OCTR_WORKER_METRICS_PORT", "worker --port")
    if settings.redis_url:
        wait_for_redis(settings.redis_url, settings.redis_wait_s, settings.redis_timeout_s)
    if port:
        start_http_server(port, addr=host)
    freeze_startup_objects()
    asyncio.run(run_worker(settings, metrics))
    return 0
