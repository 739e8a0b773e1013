"""``GET /metrics``: the Prometheus text exposition of this app's registry.

Model names are what ``GET /models`` lists to administrators only, so a series that carries a
``model`` (or ``group``) label is shown only to a request whose key has the ``metrics`` scope
on that model (an ``admin`` key has it on the models it administers), or with auth off; a key
without the scope on every model gets the process's other series, those of its models, and a
comment that says which key to scrape with. ``OCTR_PROTECT_METRICS`` closes the endpoint to
other requests altogether.
"""

from __future__ import annotations

import logging
import re

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from online_ctr.store.failures import redis_trouble
from online_ctr.store.state import ModelGoneError, ModelMismatchError
from service.api.auth import request_grants
from service.api.deps import CatalogDep, RegistryDep
from service.api.scopes import Grants

logger = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])

#: What a request without the ``metrics`` scope on every model reads before the series.
HIDDEN = (
    b"# online-ctr: series with a model label are shown only with an API key of the metrics "
    b"or admin scope on that model (Authorization: Bearer <key>)\n"
)
_LABELS = re.compile(rb'[{,](?:model|group)="([^"]*)"')


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text."}},
)
async def metrics(request: Request, catalog: CatalogDep, registry: RegistryDep) -> Response:
    """Refresh every model's gauges from Redis, then render; with Redis down, render the
    rest. The series of a model only for a key of the ``metrics`` or ``admin`` scope on it."""
    try:
        await catalog.refresh_gauges()
    except Exception as error:
        # Scrapes must keep working in an outage: that is when they matter most.
        if not (redis_trouble(error) or isinstance(error, ModelMismatchError | ModelGoneError)):
            raise
        logger.warning("model gauges not refreshed: %s", error)
    text = generate_latest(registry)
    grants = request_grants(request.app.state.auth, request.scope)
    if not grants.everywhere("metrics"):
        text = without_model_series(text, grants)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


def without_model_series(text: bytes, grants: Grants) -> bytes:
    """The exposition without its samples labelled with a model or group the key may not
    read (``metrics`` scope), a comment saying so first."""
    kept = [line for line in text.splitlines(keepends=True) if _readable(line, grants)]
    return HIDDEN + b"".join(kept)


def _readable(line: bytes, grants: Grants) -> bool:
    """Whether every model or group the sample line names is one the key may read."""
    return all(
        grants.allows("metrics", name.decode()) for name in _LABELS.findall(line.split(b"}")[0])
    )
