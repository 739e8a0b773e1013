"""``GET /metrics``: the Prometheus text exposition of this app's registry.

Model names are what ``GET /models`` lists to administrators only, so the series that carry a
``model`` label are shown only to a request whose key has the ``metrics`` scope (an ``admin``
key has it) or with auth off; anyone else gets the process's other series and a comment that
says which key to scrape with. ``OCTR_PROTECT_METRICS`` closes the endpoint to other requests
altogether.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from online_ctr.store.failures import redis_trouble
from online_ctr.store.state import ModelGoneError, ModelMismatchError
from service.api.auth import sees_model_names
from service.api.deps import CatalogDep, RegistryDep

logger = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])

#: What a request without the ``metrics`` scope reads in place of the model series.
HIDDEN = (
    b"# online-ctr: series with a model label are shown only with an API key of the metrics "
    b"or admin scope (Authorization: Bearer <key>)\n"
)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text."}},
)
async def metrics(request: Request, catalog: CatalogDep, registry: RegistryDep) -> Response:
    """Refresh every model's gauges from Redis, then render; with Redis down, render the
    rest. The series of models only for a key of the ``metrics`` or ``admin`` scope."""
    try:
        await catalog.refresh_gauges()
    except Exception as error:
        # Scrapes must keep working in an outage: that is when they matter most.
        if not (redis_trouble(error) or isinstance(error, ModelMismatchError | ModelGoneError)):
            raise
        logger.warning("model gauges not refreshed: %s", error)
    text = generate_latest(registry)
    if not sees_model_names(request.app.state.auth, request.scope):
        text = without_model_series(text)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


def without_model_series(text: bytes) -> bytes:
    """The exposition without its samples labelled ``model``, a comment saying so first."""
    kept = [line for line in text.splitlines(keepends=True) if b'model="' not in line]
    return HIDDEN + b"".join(kept)
