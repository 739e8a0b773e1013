"""Building the runtime pieces from the settings: the Redis client and the model spec.

With a ``rediss://`` URL every connection, to each node of a cluster too, speaks TLS with the
``OCTR_REDIS_TLS_*`` settings (:mod:`online_ctr.config.tls`; docs/operations/redis-tls.md).

With ``OCTR_REDIS_CLUSTER=true`` the client is redis-py's asyncio ``RedisCluster``, which finds
the other nodes from the one in the URL. What it does with scripts, pipelines, streams and a
failover was measured on a real cluster (``tests/cluster``) and is written up in
``docs/redis-cluster.md``. In short:

- the keys of a script share one hash tag (``octr:{m/3}:...``); names built inside the script
  with that tag work, and with a ``#!lua`` shebang any other slot is refused;
- a cluster pipeline takes ``execute_command("EVALSHA", ...)``, not ``Script`` objects, costs one
  round trip, is applied per master (never atomically), and does not reload a missing script:
  ``script_load`` at startup and after ``NoScriptError`` (a promoted replica has no scripts);
- a pipeline never refreshes the slot map by itself (single commands do): every pipeline of the
  store runs through ``online_ctr.store.failures.pipeline``, which refreshes it after a failure
  (``nodes_manager.initialize()``, not ``aclose()``, which cuts the commands in flight);
- ``info()`` and ``time()`` answer from one master unless ``target_nodes`` says otherwise;
- a killed master's slots come back after about node timeout + 1.5 s, and meanwhile every slot
  may answer ``ClusterDownError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, NoPermissionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from online_ctr.config.settings import Settings
from online_ctr.process import StartupError
from online_ctr.store.change_notices import ChangeNotices
from online_ctr.store.change_notices import opener as notices_opener
from online_ctr.store.model_config import own_config
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import Registry, RegistryError
from online_ctr.store.state import ModelMismatchError, ModelSpec, ModelStore


class ClusterModeError(ResponseError):
    """A plain client was redirected (MOVED): its Redis is a node of a Redis Cluster."""


class PermissionRefusedError(NoPermissionError):
    """Redis refused a command to this process's user (its ACL rules): the message names the
    user and, outside a pipeline (whose error redis-py prefixes with the command), the
    command."""


def refused(error: NoPermissionError, user: str | None, command: str | None) -> str:
    """One line for a NOPERM reply: who was refused what, and what to do.

    >>> refused(NoPermissionError("this user has no permissions to run the 'flushall' "
    ...     "command"), "octr-api", "FLUSHALL")  # doctest: +NORMALIZE_WHITESPACE
    "Redis refused FLUSHALL to its user 'octr-api' (OCTR_REDIS_URL): this user has no
    permissions to run the 'flushall' command; give the user the rules `online-ctr redis-acl`
    prints (docs/operations/security.md)"
    """
    what = f"{command} " if command else ""
    return (
        f"Redis refused {what}to its user {user or 'default'!r} (OCTR_REDIS_URL): {error}; "
        "give the user the rules `online-ctr redis-acl` prints (docs/operations/security.md)"
    )


class _MovedHint(AbstractConnection):
    """Turns a MOVED reply into a ``ClusterModeError`` that says which setting to change, and
    a NOPERM reply into a :class:`PermissionRefusedError` that names the user and command."""

    _command: str | None = None

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        self._command = None  # a pipeline's: redis-py names the command of an error itself
        await super().send_packed_command(*args, **kwargs)

    async def send_command(self, *args: Any, **kwargs: Any) -> None:
        await super().send_command(*args, **kwargs)
        name = args[0]
        self._command = (name.decode() if isinstance(name, bytes) else str(name)).upper()

    async def send_named(self, name: str, command: list[bytes]) -> None:
        """Send one command packed already (online_ctr.store.serve_call's), named ``name`` in
        a refusal as :meth:`send_command`'s are."""
        await self.send_packed_command(command, check_health=False)
        self._command = name

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except MovedError as error:
            raise ClusterModeError(
                f"Redis answered MOVED {error}: OCTR_REDIS_URL is a Redis Cluster node, "
                "set OCTR_REDIS_CLUSTER=true"
            ) from error
        except NoPermissionError as error:
            message = refused(error, self.username, self._command)
            raise PermissionRefusedError(message) from None


class _WriteAtOnce(AbstractConnection):
    """Sends a command without a task of its own when the socket takes it whole.

    redis-py sends each command under ``asyncio.wait_for(..., socket_timeout)``, which on
    Python 3.11 wraps the send in a new task and waits a turn of the event loop for it: about
    10 us of a 50 us round trip, measured, on every command. A command that the transport
    writes at once leaves nothing to wait for, so only one that leaves bytes in its buffer
    (or a transport that is closing) waits for the drain, within the timeout, as redis-py
    does, with its errors.
    """

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        writer = self._writer
        # Anything else as redis-py does it: a connection to open or to check, bytes.
        ready = writer is not None and self.is_connected and not writer.transport.is_closing()
        checks = check_health and self.health_check_interval
        if not ready or checks or not isinstance(command, list):
            await super().send_packed_command(command, check_health)
            return
        assert writer is not None
        transport = writer.transport
        writer.writelines(command)
        if not transport.is_closing() and not transport.get_write_buffer_size():
            return  # all in the socket: a drain would return at once
        try:
            await asyncio.wait_for(writer.drain(), self.socket_timeout)
        except TimeoutError:
            await self.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as error:
            await self.disconnect(nowait=True)
            number, message = ("UNKNOWN", error.args[0]) if len(error.args) == 1 else error.args
            raise RedisConnectionError(
                f"Error {number} while writing to socket. {message}."
            ) from error
        except BaseException:
            await self.disconnect(nowait=True)
            raise


class _HintedConnection(_MovedHint, _WriteAtOnce, Connection):
    pass


class _HintedSSLConnection(_MovedHint, SSLConnection):
    pass


#: The connection classes a URL can choose, each with its hinting subclass (a Unix socket is
#: never a cluster, so it keeps its own).
_HINTED: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _HintedConnection,
    SSLConnection: _HintedSSLConnection,
}


def redis_client(settings: Settings) -> RedisClient:
    """An asyncio Redis client whose every call fails within ``redis_timeout_s``.

    No retries: a retry would multiply the time a request can wait; the API answers 503
    with Retry-After instead, and the worker leaves the batch pending and tries again. A
    cluster client still follows MOVED and ASK redirections, which are not failures.
    """
    if settings.redis_url is None:
        raise StartupError(
            "no Redis URL: set OCTR_REDIS_URL (or REDIS_URL), or run `online-ctr serve`"
        )
    options: dict[str, Any] = {
        "socket_timeout": settings.redis_timeout_s,
        "socket_connect_timeout": settings.redis_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        **settings.redis_tls_options(),
    }
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url, **options)
    client = aioredis.Redis.from_url(settings.redis_url, **options)
    pool = client.connection_pool
    # Before any connection exists: every connection the pool makes will carry the hint.
    pool.connection_class = _HINTED.get(pool.connection_class, pool.connection_class)
    return client


def change_notices(settings: Settings) -> ChangeNotices | None:
    """What spares a warm ``/predict`` its round trip (:mod:`online_ctr.store.change_notices`),
    where there is a copy to keep: a single Redis with ``predict_cache_features`` above 0."""
    url = settings.redis_url
    if url is None or settings.redis_cluster or not settings.predict_cache_features:
        return None
    options = settings.redis_tls_options()
    return ChangeNotices(notices_opener(url, settings.redis_timeout_s, options))


async def check_topology(settings: Settings) -> None:
    """Refuse a Redis whose cluster mode is not what ``OCTR_REDIS_CLUSTER`` says.

    Asks the node in the URL over a connection of its own (so it works before a cluster
    client could discover anything); a Redis that cannot be reached raises the usual
    ``ConnectionError``/``TimeoutError``.
    """
    if settings.redis_url is None:
        raise StartupError(
            "no Redis URL: set OCTR_REDIS_URL (or REDIS_URL), or run `online-ctr serve`"
        )
    probe = aioredis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_timeout_s,
        retry=Retry(NoBackoff(), 0),
        **settings.redis_tls_options(),
    )
    try:
        info = await probe.info("cluster")
    finally:
        await probe.aclose()
    clustered = bool(info.get("cluster_enabled"))
    if clustered and not settings.redis_cluster:
        raise ValueError(
            "the Redis in OCTR_REDIS_URL is a Redis Cluster node: set OCTR_REDIS_CLUSTER=true"
        )
    if settings.redis_cluster and not clustered:
        raise ValueError(
            "OCTR_REDIS_CLUSTER is set but the Redis in OCTR_REDIS_URL is not a cluster node: "
            "unset OCTR_REDIS_CLUSTER (or point OCTR_REDIS_URL at a cluster node)"
        )


async def prepare_redis(settings: Settings, client: RedisClient) -> None:
    """Every startup step of the API and the worker that talks to Redis: its cluster mode,
    then the own model, created or checked (:meth:`ModelStore.ensure`) and recorded in the
    registry as the settings describe it now. A refusal is one :class:`StartupError` line;
    Redis going away raises the Redis error, which :func:`online_ctr.startup.on_redis` waits out."""
    try:
        await check_topology(settings)
    except ValueError as error:  # its cluster mode is not what OCTR_REDIS_CLUSTER says
        raise StartupError(str(error)) from None
    try:
        await ModelStore(client, model_spec(settings)).ensure()
        registry = Registry(client, settings.max_models)
        # The settings may have changed since the last run (ensure refused a model they no
        # longer describe): the registry says what they are now.
        await registry.create(settings.model, own_config(settings), replace=True)
    except (ModelMismatchError, RegistryError) as error:
        raise StartupError(str(error)) from None


def model_spec(settings: Settings) -> ModelSpec:
    """The spec of the model this process serves or learns: that of its configuration, as the
    registry records it (:func:`~online_ctr.store.model_config.own_config`)."""
    return own_config(settings).spec(settings.model)
