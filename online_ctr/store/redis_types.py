"""The Redis client type the adapters accept: plain, or Redis Cluster (``OCTR_REDIS_CLUSTER``).

Its own module so that the store can name it without importing ``online_ctr.wiring``, which imports
the store.
"""

from __future__ import annotations

from typing import TypeAlias

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

#: What ``online_ctr.wiring.redis_client`` returns.
RedisClient: TypeAlias = aioredis.Redis | RedisCluster
