"""The ``online-ctr worker`` process: wiring, signals and the metrics endpoint."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket

from prometheus_client import start_http_server

from online_ctr.config.settings import Settings
from online_ctr.metrics import Metrics
from online_ctr.process import tune_collector
from online_ctr.startup import check_port, on_redis
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import Registry
from online_ctr.store.replication import ReplicaAcks
from online_ctr.wiring import prepare_redis, redis_client
from workers.fleet import Fleet
from workers.learner_loop import WorkerConfig

logger = logging.getLogger(__name__)


def worker_config(settings: Settings) -> WorkerConfig:
    """The worker's grouping, lease, cache and dead-letter settings."""
    return WorkerConfig(
        name=settings.worker_name or f"{socket.gethostname()}-{os.getpid()}",
        batch_size=settings.batch_size,
        batch_wait_ms=settings.batch_wait_ms,
        batch_linger_ms=settings.batch_linger_ms,
        apply_linger_ms=settings.apply_linger_ms,
        lease_ttl_ms=settings.lease_ttl_ms,
        max_deliveries=settings.max_deliveries,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        # Ten times what readiness tolerates: only names long dead are forgotten.
        forget_workers_after_s=10 * settings.ready_max_heartbeat_age_s,
        cache_features=settings.worker_cache_features,
        auc_window=settings.auc_window,
    )


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
        acks=ReplicaAcks.of(client, settings, metrics.replica_ack_timeouts),
    )


async def run_worker(settings: Settings, metrics: Metrics) -> None:
    """Run the learners until SIGTERM or SIGINT, then finish the groups in flight and exit."""
    client = redis_client(settings)
    fleet = fleet_of(settings, client, metrics)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, fleet.stop)
    try:
        # Stopped while waiting for Redis, the fleet's run returns at once.
        await on_redis(settings, lambda: prepare_redis(settings, client), lambda: fleet.stopping)
        await fleet.run()
    finally:
        await client.aclose()
    logger.info("worker %s stopped", fleet.config.name)


def main(settings: Settings) -> int:
    """Entry point of ``online-ctr worker``."""
    metrics = Metrics()
    host, port = settings.worker_metrics_host, settings.worker_metrics_port
    check_port(host, port, "OCTR_WORKER_METRICS_PORT", "worker --port")
    if port:
        start_http_server(port, addr=host)
    tune_collector()
    asyncio.run(run_worker(settings, metrics))
    return 0
