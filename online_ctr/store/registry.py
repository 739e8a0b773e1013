"""The registry of a service's models and groups, shared by every API and worker process.

A model is created once (``PUT /models/{name}``, or the service's own ``OCTR_MODEL`` at
start) and recorded here with its configuration; a *group* is the set of models that learn
the same feedback (a champion and its challengers), with the one that serves, an optional
traffic split, and the join settings its models share. ``registry.lua`` makes every change
in one atomic step, so two admins racing cannot leave a group naming a deleted model.

Names are one namespace: a group cannot take a model's name, nor a model a group's, since
``?model=NAME`` addresses either.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from pydantic import ValidationError

from online_ctr.store.failures import pipeline
from online_ctr.store.keys import RegistryKeys
from online_ctr.store.model_config import JoinConfig, ModelConfig, PolicyBody
from online_ctr.store.redis_types import RedisClient, text
from online_ctr.store.scripts import register

logger = logging.getLogger(__name__)


class RegistryError(ValueError):
    """A change the registry refused; the message says why and what to do."""


class UnknownNameError(RegistryError, LookupError):
    """No model or group of that name."""


@dataclass(frozen=True)
class GroupInfo:
    """A group: its models in order of creation, the serving one, the traffic split
    (model -> weight; empty: all traffic to the serving model) and what its models share:
    the join settings and the feature hashing (feedback is hashed and logged once)."""

    name: str
    models: tuple[str, ...]
    serving: str
    split: dict[str, float] = field(default_factory=dict)
    shared: Shared = field(default_factory=lambda: Shared())
    #: When a challenger replaces the serving model by itself (None: only when promoted).
    promotion: PolicyBody | None = None

    @classmethod
    def decode(cls, name: str, raw: bytes | str) -> GroupInfo:
        record = json.loads(raw)
        split = record.get("split") or {}  # Lua's cjson writes an empty table as {}
        return cls(
            name,
            tuple(record["models"]),
            record["serving"],
            {str(k): float(v) for k, v in split.items()},
            Shared.model_validate_json(record["shared"]),
            _policy(name, record.get("promotion")),
        )


#: Stored policies that did not read, each warned about once (the registry is read every second).
_UNREADABLE: set[str] = set()


def _policy(group: str, stored: object) -> PolicyBody | None:
    """A group's stored promotion policy; one that does not read back (written by another
    version, or by hand) is no policy, said once, rather than a registry no process reads."""
    if not stored:
        return None
    try:
        return PolicyBody.model_validate(stored)
    except ValidationError as error:
        if repr(stored) not in _UNREADABLE:
            if len(_UNREADABLE) >= 1_000:  # bounded, as every table: warned again at worst
                _UNREADABLE.clear()
            _UNREADABLE.add(repr(stored))
            logger.warning(
                "group %r: its promotion policy does not read, ignored: %s", group, error
            )
        return None


class Shared(JoinConfig):
    """What every model of a group has in common."""

    hash_bits: int | None = None
    numeric: str = "log_bucket"
    #: The group's feedback is sampled once, before its one entry goes to every model.
    negative_rate: float = 1.0
    #: The models' crosses, shared only where the group's feedback is hashed once for all:
    #: with joins (an impression is logged as the serving model hashed it) or negative
    #: sampling (kept by a hash of the ids). Otherwise each model's entry is its own hashing,
    #: and challengers may cross other fields ("" here).
    crosses: str = ""

    @classmethod
    def of(cls, config: ModelConfig) -> Shared:
        return cls(
            join_window_s=config.join_window_s,
            unlabeled=config.unlabeled,
            hash_bits=config.hash_bits,
            numeric=config.numeric,
            negative_rate=config.negative_rate,
            crosses=config.crosses if config.join_window_s or config.negative_rate < 1 else "",
        )

    def canonical(self) -> str:
        """The canonical JSON; without ``negative_rate`` at 1, so that groups recorded before
        it existed compare equal to the same settings given now."""
        dropped = {"negative_rate"} if self.negative_rate == 1.0 else set()
        if not self.crosses:  # likewise for groups recorded before crosses
            dropped.add("crosses")
        return json.dumps(self.model_dump(mode="json", exclude=dropped), sort_keys=True)


def encode_config(config: ModelConfig) -> str:
    """The canonical JSON of a configuration (equal configurations, equal strings); without
    ``feature_names`` when it is off, nor ``negative_rate`` at 1, so that models registered
    before they existed compare equal to the same configuration given now."""
    dropped = set() if config.feature_names else {"feature_names"}
    if config.negative_rate == 1.0:  # likewise for models recorded before it existed
        dropped.add("negative_rate")
    if config.admission == "all":
        dropped.add("admission")
    if config.expire_after == 0:
        dropped.add("expire_after")
    if config.max_features == 0:
        dropped.add("max_features")
    if config.base_rate == "off":  # as models recorded before the prior existed have it
        dropped.add("base_rate")
    if not config.crosses:
        dropped.add("crosses")
    return json.dumps(config.model_dump(mode="json", exclude=dropped), sort_keys=True)


def decode_config(stored: bytes | str) -> ModelConfig:
    """A configuration as :func:`encode_config` stored it: one recorded before the base-rate
    prior existed (or with it off) has none, so its model keeps predicting without one."""
    fields = json.loads(stored)
    fields.setdefault("base_rate", "off")
    return ModelConfig.model_validate_json(json.dumps(fields))


class Registry:
    """Reads and changes the registry."""

    def __init__(self, redis: RedisClient, max_models: int) -> None:
        self.redis = redis
        self.keys = RegistryKeys()
        self.max_models = max_models
        self._script = register(redis, "registry")

    async def _run(self, *args: object) -> tuple[str, str]:
        outcome, detail = await self._script(keys=[self.keys.models, self.keys.groups], args=args)
        return text(outcome), text(detail)

    async def models(self) -> dict[str, ModelConfig]:
        """Every model, by name."""
        raw = await self.redis.hgetall(self.keys.models)
        return {text(k): decode_config(v) for k, v in raw.items()}

    async def groups(self) -> dict[str, GroupInfo]:
        """Every group, by name."""
        raw = await self.redis.hgetall(self.keys.groups)
        return {text(k): GroupInfo.decode(text(k), v) for k, v in raw.items()}

    async def configs(self, names: tuple[str, ...]) -> dict[str, ModelConfig]:
        """The configurations of the models ``names`` that exist."""
        raw = await self.redis.hmget(self.keys.models, list(names))
        found = zip(names, raw, strict=True)
        return {n: decode_config(v) for n, v in found if v is not None}

    async def lookup(self, name: str) -> ModelConfig | GroupInfo | None:
        """The model or group called ``name``, read in one round trip; None if neither."""
        async with pipeline(self.redis) as pipe:
            pipe.hget(self.keys.models, name)
            pipe.hget(self.keys.groups, name)
            model, group = await pipe.execute()
        if model is not None:
            return decode_config(model)
        return GroupInfo.decode(name, group) if group is not None else None

    async def create(self, name: str, config: ModelConfig, replace: bool = False) -> bool:
        """Record the model ``name`` (and its group's membership); True if new, False if it
        was recorded with this very configuration. ``replace`` overwrites another one (the
        service's own model, whose settings may change between runs)."""
        outcome, detail = await self._run(
            "create",
            name,
            encode_config(config),
            config.group or "",
            self.max_models,
            int(replace),
            Shared.of(config).canonical(),
        )
        if outcome in ("created", "exists"):
            return outcome == "created"
        raise RegistryError(_refusal(outcome, name, config, detail))

    async def delete(self, name: str) -> ModelConfig:
        """Remove the model ``name`` from the registry (and its group); its configuration."""
        outcome, detail = await self._run("delete", name)
        if outcome == "unknown":
            raise UnknownNameError(f"no model {name!r}")
        if outcome == "serving":
            raise RegistryError(
                f"model {name!r} serves group {detail!r}: promote another model of the group "
                f"first (PUT /groups/{detail} with another serving model)"
            )
        return decode_config(detail)

    async def serve(self, group: str, serving: str, split: dict[str, float]) -> GroupInfo:
        """Make ``serving`` the group's serving model and ``split`` its traffic split."""
        outcome, detail = await self._run("serve", group, serving, json.dumps(split))
        if outcome == "unknown":
            raise UnknownNameError(f"no group {group!r}")
        if outcome == "not_member":
            raise RegistryError(
                f"model {detail!r} is not in group {group!r}: create it there first "
                f'(PUT /models/{detail} with "group": "{group}")'
            )
        return GroupInfo.decode(group, detail)


def _refusal(outcome: str, name: str, config: ModelConfig, detail: str) -> str:
    if outcome == "name_is_group":
        return f"{name!r} is the name of a group; choose another model name"
    if outcome == "group_is_model":
        return f"group {config.group!r} would take the name of a model; choose another group"
    if outcome == "full":
        return (
            f"the service holds its most models ({detail}, OCTR_MAX_MODELS): delete one, "
            "or raise OCTR_MAX_MODELS"
        )
    if outcome == "shared_differs":
        shared = GroupInfo.decode(config.group or "", detail).shared
        given = ", ".join(f"{k}={v!r}" for k, v in shared.model_dump().items())
        return (
            f"the models of group {config.group!r} learn the same hashed feedback and share "
            f"{given}: give the same"
        )
    return (
        f"model {name!r} exists with another configuration ({detail}); delete it first or "
        "choose another name"
    )
