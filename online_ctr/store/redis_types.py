"""The Redis client type the adapters accept: plain, or Redis Cluster (``OCTR_REDIS_CLUSTER``),
and :func:`text`, what every adapter reads a reply's string with.

Its own module so that the store can name it without importing ``online_ctr.wiring``, which imports
the store.
"""

from __future__ import annotations

from typing import TypeAlias

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

#: What ``online_ctr.wiring.redis_client`` returns.
RedisClient: TypeAlias = aioredis.Redis | RedisCluster
#: What XRANGE answers (the client does not decode responses; redis-py's own type is the
#: union of every decoding): each entry's id and fields.
StreamEntries: TypeAlias = list[tuple[bytes, dict[bytes, bytes]]]


def text(value: bytes | str) -> str:
    """A Redis reply as text: the client answers bytes (a script's status, a hash's field and
    value), or str when it decodes responses.

    >>> text(b"ok"), text("ok")
    ('ok', 'ok')
    """
    return value.decode() if isinstance(value, bytes) else value
