"""What every ``online-ctr models`` action shares: the Redis it administers and how a refusal
or an unreachable Redis ends the command (one line, exit status 1)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import RedisError

from online_ctr.admin import ModelsAdmin
from online_ctr.cli.target import Target, admin_target
from online_ctr.process import StartupError, configure_logging
from online_ctr.store.keys import valid_model_name
from online_ctr.store.registry import RegistryError
from online_ctr.wiring import redis_client

T = TypeVar("T")


def check_name(name: str) -> None:
    """Refuse a name no model or group can have."""
    if not valid_model_name(name):
        raise StartupError(f"invalid model name {name!r}: use 1-64 of [A-Za-z0-9_.-]")


def admin_redis() -> Target:
    """The Redis ``OCTR_REDIS_URL`` names, or the local serve's."""
    configure_logging("warning")
    return admin_target()


def run_admin(target: Target, action: Callable[[ModelsAdmin], Awaitable[T]]) -> T:
    """Run ``action`` on the target's Redis; one line and exit status 1 if it is refused or
    Redis does not answer."""
    settings = target.settings

    async def run() -> T:
        client = redis_client(settings)
        try:
            return await action(ModelsAdmin(client, settings))
        finally:
            await client.aclose()

    try:
        return asyncio.run(run())
    except RegistryError as error:
        raise StartupError(str(error)) from None
    except (RedisError, OSError) as error:
        raise target.failure(error) from None
