"""The Lua scripts of the store, each kept in a ``.lua`` file beside this module and
registered once per client (redis-py sends EVALSHA and loads the script on NOSCRIPT)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any


def _source(name: str) -> str:
    return resources.files("octr.store").joinpath(name).read_text()


@dataclass(frozen=True)
class Scripts:
    """Every script, registered on one client."""

    read: Any
    apply: Any
    finalize: Any
    lease: Any
    dead_letter: Any

    @classmethod
    def register(cls, redis: Any) -> Scripts:
        names = ("read", "apply", "finalize", "lease", "dead_letter")
        return cls(**{name: redis.register_script(_source(f"{name}.lua")) for name in names})
