"""Building the runtime pieces from the settings: the Redis client and the model spec."""

from __future__ import annotations

import redis.asyncio as aioredis

from service.settings import Settings
from service.store.state import ModelSpec, spec_from


def redis_client(settings: Settings, url: str | None = None) -> aioredis.Redis:
    """An asyncio Redis client whose calls never hang past the configured timeout."""
    target = url or settings.redis_url
    if target is None:
        raise ValueError("no Redis URL: set OCTR_REDIS_URL (or REDIS_URL), or use `serve`")
    return aioredis.Redis.from_url(
        target,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_timeout_s,
        health_check_interval=30,
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
