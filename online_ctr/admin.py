"""The model and group operations on one Redis (create, delete, promote, import, export),
implemented once: the admin routes (:mod:`service.api.routes.models`,
:mod:`service.api.routes.snapshots`) and ``online-ctr models|import|export`` only parse the
request and answer with what these return, so the two cannot drift apart.

Refusals are :class:`RegistryError` (an :class:`UnknownNameError` for a name that is not
there) with the registry's message, and the snapshot errors of
:mod:`online_ctr.store.snapshot_import` and :mod:`online_ctr.store.snapshot_export`; the API
answers each with its status, the command prints it as one line. What is the caller's stays
the caller's: the API's cache of served models, and its own model, which it serves and so
creates again at once when emptied.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from online_ctr.config.settings import Settings
from online_ctr.store.feature_names import FeatureNames
from online_ctr.store.keys import FeedbackKeys
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.promotion import Promotions
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import (
    GroupInfo,
    Registry,
    RegistryError,
    UnknownNameError,
    encode_config,
)
from online_ctr.store.snapshot_export import Export, open_export
from online_ctr.store.snapshot_import import Imported, SnapshotImport, check_name
from online_ctr.store.state import ModelMismatchError, ModelSpec, ModelStore
from online_ctr.store.weights import Weights, WeightsReader, names_off
from online_ctr.wiring import model_spec


def own_model_refusal(name: str) -> RegistryError:
    """Creating the service's own model: its settings configure it."""
    return RegistryError(
        f"{name!r} is this service's own model (OCTR_MODEL), configured by its settings"
    )


def group_refusal(name: str) -> UnknownNameError:
    """Deleting a group by name: it ends with its last model."""
    return UnknownNameError(f"{name!r} is a group: delete its models (the last one ends it)")


def config_conflict(name: str, stored: ModelConfig, asked: ModelConfig) -> str:
    """One sentence naming each field in which ``asked`` differs from the ``stored``
    configuration of the model ``name``, with both values.

    >>> config_conflict("m", ModelConfig(rule="ftrl"), ModelConfig(rule="fobos")).split(": ", 1)[1]
    "its rule 'ftrl' (asked: 'fobos'); delete it first or choose another name"
    """
    old, new = stored.model_dump(mode="json"), asked.model_dump(mode="json")
    parts = [
        f"{field} {_shown(old[field])} (asked: {_shown(new.get(field))})"
        for field in old
        if old[field] != new.get(field)
    ]
    listed = " and its ".join([", its ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)
    return (
        f"model {name!r} exists with another configuration: its {listed}; delete it first or "
        "choose another name"
    )


def _shown(value: object) -> str:
    return "unset" if value is None else repr(value)


@dataclass(frozen=True)
class Deleted:
    """What a delete removed: how many keys, and the group the model was of (if any)."""

    keys: int
    group: str | None = None


class ModelsAdmin:
    """The registry and the models' keys of one Redis, as the settings name them; the
    ``registry`` of a caller that has one (the API's catalog) is used rather than a new one."""

    def __init__(
        self, redis: RedisClient, settings: Settings, registry: Registry | None = None
    ) -> None:
        self.redis = redis
        self.own = settings.model
        self.registry = registry or Registry(redis, settings.max_models)
        self._settings = settings

    async def list(self) -> tuple[dict[str, ModelConfig], dict[str, GroupInfo]]:
        """Every model and group by name, as ``GET /models`` lists them (the own model is
        listed once its service has registered it)."""
        return await self.registry.models(), await self.registry.groups()

    async def create(self, name: str, config: ModelConfig) -> bool:
        """Create the model (True), or confirm one that exists alike (False)."""
        if name == self.own:
            raise own_model_refusal(name)
        try:
            created = await self.registry.create(name, config)
        except RegistryError:
            # The registry's refusal quotes the stored configuration whole; name the fields.
            stored = (await self.registry.configs((name,))).get(name)
            if stored is None or encode_config(stored) == encode_config(config):
                raise  # another refusal (the registry compares the encoded configurations)
            raise RegistryError(config_conflict(name, stored, config)) from None
        try:
            await ModelStore(self.redis, config.spec(name)).ensure()
        except ModelMismatchError as error:
            if created:  # keys of an unregistered model of that name (an old import, say)
                await self.registry.delete(name)
            raise RegistryError(str(error)) from None
        return created

    async def delete(self, name: str) -> Deleted:
        """Delete the model's registry entry, then its keys, and the group's own keys (its
        idempotency records, logged impressions, pending set) with its last model.

        The own model is only emptied: its service creates it again. Keys of a model the
        registry does not know (an imported snapshot, a model older than the registry) are
        deleted too, so that a delete can clear what blocks a create.
        """
        if name == self.own:
            return Deleted(await self._store_by_name(name).delete())
        if isinstance(await self.registry.lookup(name), GroupInfo):
            raise group_refusal(name)
        try:
            config = await self.registry.delete(name)
        except UnknownNameError:
            deleted = await self._store_by_name(name).delete()
            if not deleted:
                raise
            return Deleted(deleted)
        deleted = await ModelStore(self.redis, config.spec(name)).delete()
        group = config.group
        if group is not None and await self.registry.lookup(group) is None:  # its last model
            deleted += await self._delete_matching(FeedbackKeys.of(name, group).key("*"))
            await Promotions(self.redis).forget(group)
        return Deleted(deleted, group)

    async def promote(self, group: str, serving: str, split: dict[str, float] | None) -> GroupInfo:
        """Make ``serving`` the group's serving model with ``split`` (None: keep the
        current split; empty: none)."""
        if split is None:
            found = await self.registry.lookup(group)
            if isinstance(found, ModelConfig):
                raise UnknownNameError(f"{group!r} is a model, not a group")
            if found is None:
                raise UnknownNameError(f"no model or group {group!r}")
            split = found.split
        return await self.registry.serve(group, serving, split)

    async def import_snapshot(
        self,
        name: str,
        data: AsyncIterator[bytes],
        replace: bool = False,
        expect: ModelSpec | None = None,
    ) -> Imported:
        """Import the snapshot file ``data`` as model ``name``, laid out by the settings'
        buckets and shards; ``expect``: the spec the model must have (the API's own model,
        which it goes on serving). A model other than the own one is recorded in the
        registry, servable by name: the name is checked (a group, a model of one, a full
        registry) before a byte of ``data`` is read, so a refusal leaves nothing in Redis."""
        register = name != self.own
        await check_name(self.registry, name, register)
        layout = (self._settings.state_buckets, self._settings.state_shards)
        recorder = self.registry if register else None
        importer = SnapshotImport(self.redis, name, layout, replace, expect, recorder)
        return await importer.run(data)

    async def export(self, name: str) -> Export:
        """Open an export of model ``name`` (of a group too); ModelNotFoundError."""
        found = await self.registry.lookup(name)
        group = found.group if isinstance(found, ModelConfig) else None
        return await open_export(self.redis, name, group)

    async def weights(self, name: str, top: int, feature: str | None = None) -> Weights:
        """The model's ``top`` largest weights with their names, or the one ``feature``:
        what ``GET /models/{name}/weights`` answers (:mod:`online_ctr.store.weights`)."""
        found = await self.registry.lookup(name)
        if isinstance(found, GroupInfo):
            raise UnknownNameError(f"{name!r} is a group, not a model: name one of its models")
        if found is None:
            raise UnknownNameError(f"no model {name!r} (`online-ctr models list` lists them)")
        store = ModelStore(self.redis, found.spec(name))
        most = self._settings.feature_names_max
        names = FeatureNames(self.redis, store.keys, most) if found.feature_names else None
        reader = WeightsReader(store, names)
        if feature is not None:
            return await reader.lookup(feature)
        if names is None:
            raise names_off(name, own=name == self.own)
        return await reader.top(top)

    def _store_by_name(self, name: str) -> ModelStore:
        # Only the name and key layout matter for deleting: the spec's rule is not checked.
        return ModelStore(self.redis, model_spec(self._settings.model_copy(update={"model": name})))

    async def _delete_matching(self, pattern: str) -> int:
        """Delete the keys matching ``pattern`` (one hash tag), one UNLINK per key."""
        keys = [key async for key in self.redis.scan_iter(match=pattern, count=1000)]
        for key in keys:
            await self.redis.unlink(key)
        return len(keys)
