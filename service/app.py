"""The FastAPI application: ``create_app(settings)`` assembles it; the lifespan connects Redis.

Nothing happens at import time. The app starts even when Redis is down (the model is created
in Redis on first use) and recovers by itself when Redis comes back; only a model in Redis
that was created with other settings, or a Redis whose cluster mode is not what
``OCTR_REDIS_CLUSTER`` says, stops it from starting. ``online-ctr api`` waits for Redis and
checks both before uvicorn starts (:func:`online_ctr.startup.prepare_before_serving`), so that a
refusal is one line and not a traceback of the lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig
from fastapi_offline import FastAPIOffline
from prometheus_client import REGISTRY, CollectorRegistry

from online_ctr.config.settings import Settings, get_settings
from online_ctr.learning import grouping, learner
from online_ctr.learning.rules import get_rule
from online_ctr.metrics import Metrics
from online_ctr.process import StartupError, tune_collector
from online_ctr.store.api_keys import ApiKeyStore
from online_ctr.store.model_config import own_config
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import Registry
from online_ctr.wiring import change_notices, check_topology, redis_client
from service.api import errors, scan
from service.api.auth import DOCS_ASSETS_URL, authenticator
from service.api.catalog import Catalog
from service.api.key_shares import KeyShares
from service.api.key_watch import KeyWatch
from service.api.lane import LaneDispatch
from service.api.middleware import EdgeMiddleware
from service.api.name_record import record_names
from service.api.openapi import document_auth
from service.api.routes import (
    challengers,
    health,
    keys,
    learn,
    metrics,
    models,
    predict,
    snapshots,
    weights,
)
from service.api.served import ServedModel
from service.api.tables import TableBudgets
from service.connections import RequestsInProgress

logger = logging.getLogger(__name__)

#: FastAPI's native OpenTelemetry, every part of it off.
NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}

#: The route modules, each with one ``router``.
ROUTES = (predict, learn, models, challengers, weights, snapshots, keys, health, metrics)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Connect to Redis and build the served model; close the connections on shutdown."""
    settings: Settings = app.state.settings
    grouping.warm_up()  # compiled once here, not in the first big /predict
    learner.warm_up()  # and the scoring sum
    scan.warm_up()  # and the body scanner, not in the first /learn
    # And the own rule's weights (its row math, compiled): 3-5 ms from numba's cache, up to
    # 0.6 s with none, which the first /predict would otherwise pay.
    rule = get_rule(settings.rule)
    rule.weights(rule.zeros(1), 1, settings.rule_params())
    redis = redis_client(settings)
    notices = change_notices(settings)
    try:
        registry = Registry(redis, settings.max_models)
        own = own_config(settings)

        async def register() -> None:
            # The settings may have changed since the last run (ensure refused a model
            # they no longer describe): the registry says what they are now.
            await registry.create(settings.model, own, replace=True)

        spec = own.spec(settings.model)
        metrics = app.state.metrics
        tables = TableBudgets.of(settings, metrics)
        served = ServedModel(
            spec,
            settings,
            redis,
            metrics,
            own=True,
            register=register,
            policy=own.policy(),
            tables=tables,
            negative_rate=own.negative_rate,
            notices=notices,
            others=app.state.requests.others,
        )
        if own.feature_names:
            record_names(served, redis, settings, metrics)
        try:
            await check_topology(settings)
            await served.ensure()
        except Exception as error:  # Redis's, whatever the client raised; else a bug
            if not errors.redis_unavailable(error):
                raise
            logger.warning("Redis unavailable at startup (%s); will retry on first use", error)
        app.state.served = served
        app.state.catalog = Catalog(
            served, settings, redis, metrics, tables, notices, app.state.requests.others
        )
        watching = await watch_keys(app, redis)
        if app.state.freeze_gc:
            tune_collector()  # start-up's imports and compiled code included
        try:
            yield
        finally:
            await stop_watching(app, watching)
    finally:
        if notices is not None:
            await notices.close()
        await redis.aclose()


#: How long a stopping app waits for its key watch, and then for its last-use write.
STOP_WATCHING_S = 5.0


async def watch_keys(app: FastAPI, redis: RedisClient) -> asyncio.Task[None] | None:
    """Read the keys stored in Redis, and follow them while the app runs (auth on)."""
    auth, settings = app.state.auth, app.state.settings
    if auth is None:
        return None
    store = ApiKeyStore(redis, settings.max_api_keys)
    watch = app.state.key_watch = KeyWatch(auth, store, settings, app.state.metrics)
    await watch.poll()  # Redis down: the static keys only, until it answers
    return asyncio.create_task(watch.run())


async def stop_watching(app: FastAPI, watching: asyncio.Task[None] | None) -> None:
    """Stop following the stored keys, and write when keys were last used."""
    if watching is None:
        return
    watching.cancel()
    # Bounded, so that stopping never waits on Redis for long; the interval's last use is
    # then lost. (Two apps of one make test run hung in shutdown until pytest's timeout; it
    # is not known that it was here, and this alone may not be the cure.)
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        async with asyncio.timeout(STOP_WATCHING_S):
            await watching
    with contextlib.suppress(Exception):  # Redis gone at shutdown: that interval is lost
        async with asyncio.timeout(STOP_WATCHING_S):
            await app.state.key_watch.write_last_use(force=True)


def create_app(
    settings: Settings | None = None,
    registry: CollectorRegistry | None = None,
    freeze_gc: bool = False,
) -> FastAPI:
    """The API for ``settings`` (default: from the environment), its metrics in ``registry``.

    Tests pass a private registry; the default one can hold only one app's metrics. A
    serving process sets ``freeze_gc`` (:func:`~online_ctr.process.tune_collector` once
    started up); tests, which build many apps in one process, do not.
    A configuration it cannot serve (no Redis URL, API keys on but none given) is a
    :class:`~online_ctr.process.StartupError`.
    """
    settings = settings or get_settings()
    if settings.redis_url is None:
        raise StartupError(
            "the API needs a Redis: set OCTR_REDIS_URL (or REDIS_URL), or run "
            "`online-ctr serve`, which starts one"
        )
    auth = authenticator(settings)
    registry = REGISTRY if registry is None else registry
    # Swagger UI (/docs) and ReDoc (/redoc) load their JS and CSS from the installed
    # fastapi-offline package under DOCS_ASSETS_URL, not from a CDN: the docs work offline.
    app = FastAPIOffline(
        static_url=DOCS_ASSETS_URL,
        title="online-ctr",
        summary="Real-time click-through-rate prediction, learning online from feedback.",
        version="0.1.0",
        lifespan=lifespan,
        # FastAPI's own OpenTelemetry is off: the service's metrics are Prometheus's, and
        # asking for it looked up three environment variables in every request (~4% of a
        # single /predict's CPU, py-spy).
        telemetry=NO_TELEMETRY,
        # The routers' routes, not the routers: this FastAPI nests an included router, and
        # matching through it cost /predict about 5% of its throughput (measured).
        routes=[route for module in ROUTES for route in module.router.routes],
    )
    app.state.settings = settings
    app.state.auth = auth
    app.state.key_watch = None  # the lifespan's, with auth on
    app.state.registry = registry
    app.state.freeze_gc = freeze_gc
    app.state.metrics = Metrics(registry)
    # Told by the server's protocol (service.connections.bounded_protocol) which requests are
    # in progress, so that a /predict among others waits for them in one pass.
    app.state.requests = RequestsInProgress()
    errors.install(app)
    app.add_middleware(LaneDispatch, fastapi=app)  # inside the edge: keys and limits apply
    app.add_middleware(
        EdgeMiddleware,
        requests=app.state.metrics.http_requests,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        auth=auth,
        shares=None if auth is None else KeyShares(auth, settings.max_requests_per_key),
        busy=app.state.metrics.http_refusals.labels("key_concurrency"),
        retry_after_s=settings.retry_after_s,
    )
    if auth is not None:
        document_auth(app, auth)
    return app
