"""The models and groups this API process serves, by name.

Its own model (``OCTR_MODEL``) is always there. Any other name is looked up in the registry
(:mod:`online_ctr.store.registry`) on first use and again once its entry is older than
``OCTR_REGISTRY_REFRESH_S``: a model created, deleted or promoted through another process is
seen within that time (through this one, at once). A model whose entry has not changed keeps
its ``ServedModel``, and with it its hasher's cache.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from online_ctr.config.settings import Settings
from online_ctr.metrics import Metrics
from online_ctr.store.change_notices import ChangeNotices
from online_ctr.store.idempotency import KeyLimits
from online_ctr.store.ingest import FeedbackLog
from online_ctr.store.keys import FeedbackKeys
from online_ctr.store.memory import redis_memory
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import GroupInfo, Registry, UnknownNameError
from online_ctr.store.replication import ReplicaAcks
from service.api.groups import ServedGroup
from service.api.join_side import ServedJoins
from service.api.name_record import record_names
from service.api.served import ServedModel
from service.api.tables import TableBudgets

Served = ServedModel | ServedGroup


class Catalog:
    """Finds the served model or group of a name."""

    def __init__(
        self,
        own: ServedModel,
        settings: Settings,
        redis: RedisClient,
        metrics: Metrics,
        tables: TableBudgets | None = None,
        notices: ChangeNotices | None = None,
        others: Callable[[], bool] = lambda: False,
    ) -> None:
        self.own = own
        self.tables = tables
        self.notices = notices
        self.others = others  # whether the server holds other requests (ServedModel's)
        self.registry = Registry(redis, settings.max_models)
        self._settings = settings
        self._redis = redis
        self._metrics = metrics
        self._refresh_s = settings.registry_refresh_s
        self._models: dict[str, tuple[ModelConfig, ServedModel]] = {}
        self._groups: dict[str, tuple[float, ServedGroup]] = {}
        self._looked_up: dict[str, float] = {}

    async def get(self, name: str, fresh: bool = False) -> Served:
        """The model or group ``name`` (looked up again if ``fresh``); UnknownNameError."""
        if name == self.own.name:
            return self.own
        now = time.monotonic()
        if not fresh and now - self._looked_up.get(name, -1e9) < self._refresh_s:
            group = self._groups.get(name)
            if group is not None:
                return group[1]
            if name in self._models:
                return self._models[name][1]
        return await self._lookup(name, now)

    async def _lookup(self, name: str, now: float) -> Served:
        found = await self.registry.lookup(name)
        self._looked_up[name] = now
        if found is None:
            self.forget(name)
            raise UnknownNameError(f"no model or group {name!r} (GET /models lists them)")
        if isinstance(found, ModelConfig):
            return self._model(name, found)
        group = await self._group(found)
        self._groups[name] = (now, group)
        return group

    def forget(self, name: str) -> None:
        """Drop what is known of ``name`` (it was deleted), its metric series included."""
        if self._models.pop(name, None) is not None:
            self._metrics.forget_model(name)
        self._groups.pop(name, None)
        self._looked_up.pop(name, None)

    def _model(self, name: str, config: ModelConfig) -> ServedModel:
        known = self._models.get(name)
        if known is not None and known[0] == config:
            return known[1]
        spec, settings, redis, metrics = (
            config.spec(name),
            self._settings,
            self._redis,
            self._metrics,
        )
        policy = config.policy()
        served = ServedModel(
            spec,
            settings,
            redis,
            metrics,
            policy=policy,
            tables=self.tables,
            negative_rate=config.negative_rate,
            notices=self.notices,
            others=self.others,
        )
        if config.feature_names:
            record_names(served, redis, settings, metrics)
        self._models[name] = (config, served)
        return served

    async def _group(self, info: GroupInfo) -> ServedGroup:
        configs = await self.registry.configs(info.models)
        members = {
            name: self._model(name, configs[name]) for name in info.models if name in configs
        }
        if info.serving not in members:  # deleted between the two reads: as if gone
            raise UnknownNameError(f"group {info.name!r} is changing; try again")
        keys = [member.store.keys for member in members.values()]
        key_limits = KeyLimits.of(self._settings)
        tag = FeedbackKeys.of(info.serving, info.name)
        acks = ReplicaAcks.of(self._redis, self._settings, self._metrics.replica_ack_timeouts)
        rate = info.shared.negative_rate
        feedback = FeedbackLog(self._redis, tag, keys, key_limits, acks, rate)
        streams = [k.stream for k in keys]
        serving = members[info.serving].store.keys
        policy = info.shared.policy()
        most = self._settings.max_pending_impressions
        joins = ServedJoins(
            self._redis,
            serving,
            streams,
            policy,
            self._metrics,
            key_limits,
            most,
            acks,
            rate,
        )
        return ServedGroup(info, members, feedback, joins)

    async def models(self) -> list[ServedModel]:
        """Every model of the registry (for the metrics' gauges), the own one first."""
        configs = await self.registry.models()
        for gone in set(self._models) - set(configs):  # deleted through another process
            self.forget(gone)
        others = [self._model(n, c) for n, c in sorted(configs.items()) if n != self.own.name]
        return [self.own, *others]

    async def refresh_gauges(self) -> None:
        """Set every model's gauges from Redis, concurrently, and Redis's memory gauges."""
        await self.refresh_memory_gauges()
        await asyncio.gather(*(model.refresh_gauges() for model in await self.models()))
        if self.tables is not None:
            self.tables.export(self._metrics)

    async def refresh_memory_gauges(self) -> None:
        """Set Redis's memory and its limit (INFO memory): how near it is to refusing writes."""
        memory = await redis_memory(self._redis)
        self._metrics.redis_memory.set(memory.used)
        self._metrics.redis_maxmemory.set(memory.limit)
