"""The answers that list models and groups (``GET /models``, ``GET /groups/{name}``), from the
registry's records; ``online-ctr models list`` prints the same."""

from __future__ import annotations

from online_ctr.challengers import Challengers
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.registry import GroupInfo
from service.api.challenger_schemas import PromotionRecord, StandingResponse
from service.api.model_schemas import (
    GroupDetailResponse,
    GroupResponse,
    ModelListResponse,
    ModelSummary,
)


def model_list(
    configs: dict[str, ModelConfig], groups: dict[str, GroupInfo], own: str
) -> ModelListResponse:
    """The answer of ``GET /models``: every model (``own`` is the service's) and group."""
    models = [
        ModelSummary(name=name, rule=config.rule, group=config.group, own=name == own)
        for name, config in sorted(configs.items())
    ]
    return ModelListResponse(
        models=models, groups=[group_response(info) for _, info in sorted(groups.items())]
    )


def group_response(info: GroupInfo) -> GroupResponse:
    """A group as the API describes it."""
    return GroupResponse(
        name=info.name,
        models=list(info.models),
        serving=info.serving,
        split=info.split,
        join_window_s=info.shared.join_window_s,
        unlabeled=info.shared.unlabeled,
        promotion=info.promotion,
    )


def group_detail(found: Challengers) -> GroupDetailResponse:
    """A group with its challengers' standings and its policy's last promotions."""
    return GroupDetailResponse(
        **group_response(found.info).model_dump(),
        challengers=[StandingResponse.of(s) for s in found.standings],
        promotions=[PromotionRecord.of(r) for r in found.promotions],
    )
