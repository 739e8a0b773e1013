"""Which errors are the Redis client failing (not now), and the one way a cluster client
recovers from a failed pipeline.

redis-py does not raise only ``RedisError`` when a connection breaks. A connection torn down by
one coroutine while another is between its checks and its write raises ``AttributeError:
'NoneType' object has no attribute 'writelines'`` from ``redis/asyncio/connection.py`` (seen
in a failover; reproduced in ``tests/workers/test_client_failures.py``). So an error is a client
failure when it is one of the classes that mean "unreachable, lost or down" (:data:`DOWN`),
or when it was raised by the client's transport: the innermost frame of its traceback outside
the standard library is in redis-py's connections, parsers, or cluster nodes and slot map
(:data:`TRANSPORT`). A ``RedisError`` that is an answer (a script's error, bad arguments)
stays one, and an error raised in our own code, or in redis-py's argument handling (a key
routed to two slots), is a bug: the API answers it 500 and logs its traceback.

A cluster client that runs only pipelines never refreshes its slot map by itself
(docs/redis-cluster.md): :func:`pipeline` refreshes it after every failure, with
``nodes_manager.initialize()``, which keeps in-flight commands' connections (``aclose()`` would
cut them, and that is how the ``AttributeError`` above was made).
"""

from __future__ import annotations

import asyncio
import logging
import sysconfig
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster

from online_ctr.store.redis_types import RedisClient

logger = logging.getLogger(__name__)

#: Errors that say Redis cannot be reached or cannot serve now, wherever they are raised.
DOWN: tuple[type[Exception], ...] = (
    redis_errors.ConnectionError,  # includes BusyLoadingError (LOADING)
    redis_errors.TimeoutError,
    redis_errors.ClusterDownError,  # includes MasterDownError
    redis_errors.TryAgainError,
    redis_errors.ReadOnlyError,  # a master demoted to replica
    redis_errors.SlotNotCoveredError,
    ConnectionError,
    TimeoutError,  # asyncio.TimeoutError too
)
#: Errors other than ``RedisError`` that redis-py's code raises on a connection torn down
#: under it (the API routes these to its handler, which tells them from our bugs).
INTERNAL: tuple[type[Exception], ...] = (
    AttributeError,
    TypeError,
    LookupError,
    ValueError,
    RuntimeError,
    AssertionError,
    EOFError,
    OSError,
    asyncio.InvalidStateError,
)
_REDIS = Path(redis.__file__).parent
#: redis-py's transport: the modules of connections and pools, and the wire parsers.
TRANSPORT = frozenset(
    _REDIS / name
    for name in (
        "asyncio/connection.py",
        "connection.py",
        "_parsers/base.py",
        "_parsers/resp2.py",
        "_parsers/resp3.py",
        "_parsers/hiredis.py",
        "_parsers/socket.py",
    )
)
#: And, in the cluster client's modules, the classes of its nodes and slot map (not its
#: routing, which raises for a key list of ours that spans slots).
CLUSTER_MODULES = frozenset({_REDIS / "asyncio/cluster.py", _REDIS / "cluster.py"})
CLUSTER_TRANSPORT = ("ClusterNode.", "NodesManager.")
_STDLIB = Path(sysconfig.get_paths()["stdlib"])


def client_failure(error: BaseException) -> bool:
    """Whether ``error`` is the Redis client failing to reach or use Redis (not a bug).

    >>> client_failure(redis_errors.ConnectionError("Connection closed by server."))
    True
    >>> client_failure(redis_errors.ResponseError("ERR unknown command"))
    False
    >>> client_failure(AttributeError("raised here, in our code"))
    False
    """
    if isinstance(error, DOWN):
        return True
    if isinstance(error, redis_errors.RedisError) and not isinstance(
        error, redis_errors.RedisClusterException
    ):
        return False  # an answer: a reply, arguments refused, a script missing
    return isinstance(error, (*INTERNAL, redis_errors.RedisClusterException)) and in_transport(
        error.__traceback__
    )


def redis_trouble(error: BaseException) -> bool:
    """Whether a loop that works against Redis waits ``error`` out and tries again: any
    ``RedisError`` or ``OSError`` (a refusal too: the next try may pass), or a client failure.
    Anything else is a bug, not to be retried blindly."""
    return isinstance(error, redis_errors.RedisError | OSError) or client_failure(error)


def in_transport(traceback: TracebackType | None) -> bool:
    """Whether the innermost frame of ``traceback`` outside the standard library is in
    redis-py's transport (:data:`TRANSPORT`, :data:`CLUSTER_TRANSPORT`)."""
    frames = []
    while traceback is not None:
        frames.append(traceback.tb_frame.f_code)
        traceback = traceback.tb_next
    for code in reversed(frames):
        path = Path(code.co_filename)
        if _stdlib(path):
            continue
        if path in TRANSPORT:
            return True
        return path in CLUSTER_MODULES and code.co_qualname.startswith(CLUSTER_TRANSPORT)
    return False


def _stdlib(path: Path) -> bool:
    return path.is_relative_to(_STDLIB) and not {"site-packages", "dist-packages"} & set(path.parts)


#: Per cluster client, the refresh of its slot map under way (failures at once share one).
_REFRESHING: weakref.WeakKeyDictionary[RedisCluster, asyncio.Task[None]] = (
    weakref.WeakKeyDictionary()
)


async def refresh(client: RedisClient) -> None:
    """Ask a cluster client's nodes for the slot map again (nothing for a single Redis).

    Failures at the same moment share one refresh. One that fails (every node it asks is
    down, or the slots are not all served yet) is logged and left: the next failure tries
    again. Connections in use are kept, and reconnect lazily (redis-py marks them).
    """
    if not isinstance(client, RedisCluster):
        return
    task = _REFRESHING.get(client)
    if task is None or task.done():
        task = asyncio.create_task(client.nodes_manager.initialize())
        task.add_done_callback(_retrieve)  # awaited by no one if every caller was cancelled
        _REFRESHING[client] = task
    try:
        await asyncio.shield(task)
    except Exception as error:  # the pipeline's own error is what the caller reports
        logger.debug("refreshing the cluster's slot map failed: %r", error)


def _retrieve(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


@asynccontextmanager
async def pipeline(client: RedisClient) -> AsyncIterator[Any]:
    """A non-transactional pipeline of ``client``; a failure raised in the block (the
    execute, or a command's error raised from its results) refreshes the client's slot map
    first, if it is a client failure (:func:`client_failure`)."""
    try:
        async with client.pipeline(transaction=False) as pipe:
            yield pipe
    except Exception as error:
        if client_failure(error):
            await refresh(client)
        raise
