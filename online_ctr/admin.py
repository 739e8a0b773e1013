"""The model and group operations on one Redis: what ``online-ctr models`` does, with the same
steps, rules and refusals as the admin routes (:mod:`service.api.routes.models`).

Refusals are :class:`RegistryError` (an :class:`UnknownNameError` for a name that is not
there) with the registry's message; the command prints it as one line.
"""

from __future__ import annotations

from online_ctr.config.settings import Settings
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import GroupInfo, Registry, RegistryError, UnknownNameError
from online_ctr.store.state import ModelMismatchError, ModelStore
from online_ctr.wiring import model_spec


class ModelsAdmin:
    """The registry and the models' keys of one Redis, as the settings name them."""

    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        self.redis = redis
        self.own = settings.model
        self.registry = Registry(redis, settings.max_models)
        self._settings = settings

    async def list(self) -> tuple[dict[str, ModelConfig], dict[str, GroupInfo]]:
        """Every model and group by name, as ``GET /models`` lists them (the own model is
        listed once its service has registered it)."""
        return await self.registry.models(), await self.registry.groups()

    async def create(self, name: str, config: ModelConfig) -> bool:
        """Create the model (True), or confirm one that exists alike (False)."""
        if name == self.own:
            raise RegistryError(
                f"{name!r} is this service's own model (OCTR_MODEL), configured by its settings"
            )
        created = await self.registry.create(name, config)
        try:
            await ModelStore(self.redis, config.spec(name)).ensure()
        except ModelMismatchError as error:
            if created:  # keys of an unregistered model of that name (an old import, say)
                await self.registry.delete(name)
            raise RegistryError(str(error)) from None
        return created

    async def delete(self, name: str) -> int:
        """Delete the model's registry entry, then its keys; how many keys there were.

        The own model is only emptied: its service creates it again. Keys of a model the
        registry does not know (an imported snapshot, a model older than the registry) are
        deleted too, so that this command can clear what blocks a ``models create``.
        """
        if name == self.own:
            return await self._store_by_name(name).delete()
        if isinstance(await self.registry.lookup(name), GroupInfo):
            raise UnknownNameError(f"{name!r} is a group: delete its models (the last one ends it)")
        try:
            config = await self.registry.delete(name)
        except UnknownNameError:
            deleted = await self._store_by_name(name).delete()
            if not deleted:
                raise
            return deleted
        return await ModelStore(self.redis, config.spec(name)).delete()

    async def promote(self, group: str, serving: str, split: dict[str, float] | None) -> GroupInfo:
        """Make ``serving`` the group's serving model with ``split`` (None: keep the
        current split; empty: none)."""
        if split is None:
            found = await self.registry.lookup(group)
            if isinstance(found, ModelConfig):
                raise UnknownNameError(f"{group!r} is a model, not a group")
            if found is None:
                raise UnknownNameError(f"no model or group {group!r} (online-ctr models list)")
            split = found.split
        return await self.registry.serve(group, serving, split)

    def _store_by_name(self, name: str) -> ModelStore:
        # Only the name and key layout matter for deleting: the spec's rule is not checked.
        return ModelStore(self.redis, model_spec(self._settings.model_copy(update={"model": name})))
