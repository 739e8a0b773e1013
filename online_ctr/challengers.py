"""A group's challengers, implemented once for ``/groups/{name}/...`` and ``online-ctr models``:
a sweep that creates a grid of them in one call, the promotion policy that lets the best one
replace the serving model (:mod:`workers.promoter`), and what the promoter found so far.

A sweep's models are named after the group and the values they take
(``ctr-alpha_0.05-l1_1``), so the same sweep sent twice creates nothing the second time, and
it is refused whole, before any model is created, when the registry cannot hold it
(``OCTR_MAX_MODELS``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from online_ctr.admin import ModelsAdmin
from online_ctr.learning.promotion import Paired, alpha_each
from online_ctr.store.keys import valid_model_name
from online_ctr.store.model_config import ModelConfig, PolicyBody
from online_ctr.store.promotion import Promotions
from online_ctr.store.registry import GroupInfo, RegistryError, UnknownNameError

#: The hyper-parameters a sweep may vary (those of :class:`ModelConfig`).
SWEPT = ("alpha", "beta", "l1", "l2", "gamma", "theta", "k")
#: Most models one sweep creates.
MOST_SWEPT = 64


@dataclass(frozen=True)
class Standing:
    """A challenger against the serving model, as the promoter has tallied it."""

    model: str
    paired_examples: int
    relative_gain: float
    #: The test's lower bound on the mean score per unit (None before two pairs).
    lower_bound: float | None


@dataclass(frozen=True)
class Challengers:
    """A group with its policy's findings: the challengers' standings and the promotions."""

    info: GroupInfo
    standings: list[Standing]
    promotions: list[dict[str, str]]


def sweep_names(
    group: str, grid: dict[str, list[float]], crosses: list[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """Each model of the grid: its name and the values it takes, in the grid's order. With
    ``crosses`` (sets of crosses, ``a&b,c&d`` each; "" for none), every set is one more
    dimension, first, named by its place in the list (a model name has no ``&``).

    >>> [name for name, _ in sweep_names("ctr", {"alpha": [0.05, 0.1], "l1": [1.0]})]
    ['ctr-alpha_0.05-l1_1', 'ctr-alpha_0.1-l1_1']
    >>> [name for name, _ in sweep_names("ctr", {}, ["", "site&hour"])]
    ['ctr-crosses_0', 'ctr-crosses_1']
    """
    unknown = sorted(set(grid) - set(SWEPT))
    if unknown:
        raise RegistryError(f"cannot sweep {', '.join(unknown)}: sweep {', '.join(SWEPT)}")
    if (not grid and not crosses) or any(not values for values in grid.values()):
        raise RegistryError("a sweep needs at least one value for each hyper-parameter it names")
    params = list(grid)
    sets: list[tuple[int, str | None]] = list(enumerate(crosses)) if crosses else [(0, None)]
    models = []
    for (index, crossing), values in itertools.product(sets, itertools.product(*grid.values())):
        if not all(math.isfinite(v) for v in values):
            raise RegistryError("a sweep's values must be finite numbers")
        parts = [] if crossing is None else [f"crosses_{index}"]
        parts += [f"{p}_{v:g}" for p, v in zip(params, values, strict=True)]
        name = "-".join([group, *parts])
        if not valid_model_name(name):
            raise RegistryError(f"the sweep's model name {name!r} is too long: use a shorter group")
        point: dict[str, Any] = dict(zip(params, values, strict=True))
        if crossing is not None:
            point["crosses"] = crossing
        models.append((name, point))
    if len(models) > MOST_SWEPT:
        raise RegistryError(f"the grid has {len(models)} models; a sweep creates at most 64")
    return models


class SweepValueError(ValueError):
    """A model of the grid whose configuration is invalid: the message names its values."""


def sweep_configs(
    group: str, base: ModelConfig, grid: dict[str, list[float]], crosses: list[str] | None = None
) -> list[tuple[str, ModelConfig]]:
    """Each model of the grid with its configuration (``base`` with its values), all checked
    before any is created."""
    if crosses and len(crosses) > 1 and (base.join_window_s or base.negative_rate < 1):
        raise SweepValueError(
            "models that cross differently cannot share a group with joins or negative "
            "sampling (its feedback is then hashed once for all): sweep crosses without them"
        )
    configs = []
    for name, values in sweep_names(group, grid, crosses):
        try:
            config = ModelConfig.model_validate({**base.model_dump(), **values, "group": group})
        except ValidationError as error:
            shown = ", ".join(
                f"{p}={v!r}" if isinstance(v, str) else f"{p}={v:g}" for p, v in values.items()
            )
            reasons = "; ".join(str(e["msg"]) for e in error.errors())
            raise SweepValueError(f"the grid's model {shown} is invalid: {reasons}") from None
        configs.append((name, config))
    return configs


async def sweep(
    admin: ModelsAdmin, configs: list[tuple[str, ModelConfig]]
) -> list[tuple[str, bool]]:
    """Create the grid's models (:func:`sweep_configs`); per model its name and whether it
    is new. Refused whole if the registry has no room for the new ones."""
    existing = await admin.registry.models()
    new = [name for name, _ in configs if name not in existing]
    room = admin.registry.max_models - len(existing)
    if len(new) > room:
        raise RegistryError(
            f"the sweep needs {len(new)} new models and the service has room for {room} "
            "(OCTR_MAX_MODELS): delete models, raise OCTR_MAX_MODELS, or sweep fewer values"
        )
    return [(name, await admin.create(name, config)) for name, config in configs]


async def set_policy(admin: ModelsAdmin, group: str, policy: PolicyBody | None) -> GroupInfo:
    """Give ``group`` a promotion policy (None: take it away); its tallies restart."""
    await _group(admin, group)
    return await Promotions(admin.redis).set_policy(group, policy)


async def challengers(admin: ModelsAdmin, group: str, recent: int = 10) -> Challengers:
    """The group, its challengers' standings and its last ``recent`` promotions."""
    info = await _group(admin, group)
    promotions = Promotions(admin.redis)
    _, state = await promotions.state(group)
    standings = []
    if state is not None and state.champion == info.serving and info.promotion is not None:
        policy = info.promotion.policy()
        alpha = alpha_each(policy, len(state.pairs))
        for model, tally in sorted(state.pairs.items()):
            standings.append(_standing(model, tally, alpha, policy.planned_units))
    elif info.promotion is not None:
        # The promoter has not run since the policy or the serving model changed: nothing is
        # paired yet, and every other model of the group is a challenger.
        others = sorted(set(info.models) - {info.serving})
        standings = [Standing(model, 0, 0.0, None) for model in others]
    return Challengers(info, standings, await promotions.recent(group, recent))


def _standing(model: str, tally: Paired, alpha: float, planned_units: int) -> Standing:
    bound = tally.lower_bound(alpha, planned_units)
    shown = bound if math.isfinite(bound) else None
    return Standing(model, tally.examples, tally.relative_gain, shown)


async def _group(admin: ModelsAdmin, group: str) -> GroupInfo:
    found = await admin.registry.lookup(group)
    if isinstance(found, GroupInfo):
        return found
    if found is None:
        raise UnknownNameError(f"no group {group!r} (`online-ctr models list` lists them)")
    raise UnknownNameError(f"{group!r} is a model, not a group")
