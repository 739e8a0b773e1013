"""The answer of ``GET /models/{name}/weights``."""

from __future__ import annotations

from pydantic import BaseModel, Field

from online_ctr.store.weights import Weights


class FeatureWeightResponse(BaseModel):
    """One feature: its id, recorded name, weight and state."""

    id: int = Field(description="The feature id (unsigned 64-bit).", examples=[2373249705619041454])
    name: str | None = Field(
        description="The name it was hashed from, if recorded (null: not recorded, e.g. the "
        "record was full); the bias's is the empty string.",
        examples=["site=news"],
    )
    weight: float = Field(examples=[0.42])
    state: dict[str, float] = Field(
        description="The rule's state fields of the feature.", examples=[{"z": -1.2, "n": 3.5}]
    )
    number: float | None = Field(
        None,
        description="Looked up by a number (`feature=hour=20`): that number, and `name` is "
        "the feature it becomes (`hour=8`, its log_bucket; in raw mode `hour`); null for a "
        "category.",
        examples=[None],
    )


class WeightsResponse(BaseModel):
    """Features of a model, at the model's global step."""

    model: str = Field(examples=["default"])
    global_step: int = Field(description="The step the weights were computed at.")
    features: list[FeatureWeightResponse]
    names_recorded: int | None = Field(
        description="Names the model's record holds (null: it records none)."
    )
    names_max: int | None = Field(description="OCTR_FEATURE_NAMES_MAX (null: no record).")


def weights_response(weights: Weights) -> WeightsResponse:
    """The answer for ``weights``."""
    return WeightsResponse(
        model=weights.model,
        global_step=weights.t,
        features=[
            FeatureWeightResponse(
                id=f.id, name=f.name, weight=f.weight, state=f.state, number=f.number
            )
            for f in weights.features
        ],
        names_recorded=weights.names_recorded,
        names_max=weights.names_max,
    )
