"""``GET /metrics``: the Prometheus text exposition of this app's registry."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError

from online_ctr.store.state import ModelGoneError, ModelMismatchError
from service.api.deps import CatalogDep, RegistryDep

logger = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text."}},
)
async def metrics(catalog: CatalogDep, registry: RegistryDep) -> Response:
    """Refresh every model's gauges from Redis, then render; with Redis down, render the
    rest."""
    try:
        await catalog.refresh_gauges()
    except (RedisError, OSError, ModelMismatchError, ModelGoneError) as error:
        # Scrapes must keep working in an outage: that is when they matter most.
        logger.warning("model gauges not refreshed: %s", error)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
