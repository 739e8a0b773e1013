"""Building the runtime pieces from the settings: the Redis client and the model spec."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from octr.process import StartupError
from octr.settings import Settings
from octr.store.state import ModelSpec, spec_from


def redis_client(settings: Settings) -> aioredis.Redis:
    """An asyncio Redis client whose every call fails within ``redis_timeout_s``.

    No retries: a retry would multiply the time a request can wait; the API answers 503
    with Retry-After instead, and the worker leaves the batch pending and tries again.
    """
    if settings.redis_url is None:
        raise StartupError(
            "no Redis URL: set OCTR_REDIS_URL (or REDIS_URL), or run `online-ctr serve`"
        )
    return aioredis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_timeout_s,
        retry=Retry(NoBackoff(), 0),
    )


def model_spec(settings: Settings) -> ModelSpec:
    """The spec of the model this process serves or learns."""
    return spec_from(
        settings.model,
        settings.rule,
        settings.rule_params(),
        settings.hash_bits,
        settings.state_buckets,
    )
