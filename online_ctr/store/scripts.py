"""The Lua scripts of the store, each kept in a ``.lua`` file beside this module and
registered once per client (redis-py sends EVALSHA and loads the script on NOSCRIPT)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

from online_ctr.store.redis_types import RedisClient


def _source(name: str) -> str:
    return resources.files("online_ctr.store").joinpath(name).read_text()


#: Every script gets the input checks of ``checks.lua`` first (each checks its inputs before
#: its first write); those that trim the redo log, the pin-aware ``trim_redo`` of ``pins.lua``;
#: those that read or write buckets, ``bucket_key`` of ``buckets.lua``, and those that read
#: them, ``read_records`` of ``reads.lua``; those that write Idempotency-Key records, the
#: bounded records and index of ``idempotency.lua``; those that turn impressions into
#: non-clicks, the negative sampling of ``negatives.lua``.
_PRELUDE = {
    "append": ("idempotency.lua",),
    "join": ("idempotency.lua", "negatives.lua"),
    "sweep": ("negatives.lua",),
    "impressions_log": ("negatives.lua",),
    "finalize": ("pins.lua",),
    "trim": ("pins.lua",),
    "read": ("buckets.lua", "reads.lua"),
    "serve": ("buckets.lua", "reads.lua"),
    "apply": ("buckets.lua",),
    "registry": ("groups.lua",),
    "promotion": ("groups.lua",),
}


def _script(name: str) -> str:
    parts = ("checks.lua", *_PRELUDE.get(name, ()), f"{name}.lua")
    return "".join(_source(part) + "\n" for part in parts)


def register(redis: RedisClient, name: str) -> Any:
    """The script ``name.lua`` with its prelude, registered on ``redis``: the one way every
    script of the store is registered, those of :class:`Scripts` and the feedback side's
    (``append``, ``impressions_log``, ``join``, ``sweep``) alike."""
    return redis.register_script(_script(name))


@dataclass(frozen=True)
class Scripts:
    """Every script, registered on one client."""

    read: Any
    serve: Any
    apply: Any
    finalize: Any
    lease: Any
    dead_letter: Any
    trim: Any
    snapshot_pin: Any
    claim: Any
    finish: Any
    scan: Any
    generation: Any
    expired: Any

    @classmethod
    def register(cls, redis: RedisClient) -> Scripts:
        names = [field.name for field in fields(cls)]
        return cls(**{name: register(redis, name) for name in names})
