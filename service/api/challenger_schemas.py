"""What ``/groups/{name}/promotion`` and ``/groups/{name}/sweep`` take and answer, and the
challengers' part of ``GET /groups/{name}``."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from online_ctr.challengers import MOST_SWEPT, Standing
from online_ctr.learning.crosses import MOST_CROSSES
from online_ctr.store.model_config import ModelConfig, PolicyBody

#: What a sweep may vary: :data:`online_ctr.challengers.SWEPT` (a test keeps them equal).
Swept = Literal["alpha", "beta", "l1", "l2", "gamma", "theta", "k"]
Values = Annotated[
    list[Annotated[float, Strict(), Field(allow_inf_nan=False)]],
    Field(min_length=1, max_length=MOST_SWEPT),
]


class SweepBase(ModelConfig):
    """What every model of a sweep has besides its swept values: a model's configuration, but
    for its group, which is the path's."""

    group: None = Field(None, description="Always the path's group: leave it out.")


class SweepRequest(BaseModel):
    """A grid of challengers: every combination of the values, each a model of the group."""

    model_config = ConfigDict(extra="forbid")

    grid: dict[Swept, Values] = Field(
        default_factory=dict,
        description="Hyper-parameter -> its values (alpha, beta, l1, l2, gamma, theta, k); at "
        f"most {MOST_SWEPT} combinations (with crosses').",
        examples=[{"alpha": [0.02, 0.05, 0.1], "l1": [0.1, 1.0, 3.0]}],
    )
    crosses: list[Annotated[str, Field(max_length=MOST_CROSSES * 130)]] | None = Field(
        None,
        min_length=1,
        max_length=MOST_SWEPT,
        description='Sets of crosses to sweep too, each A&B pairs separated by commas ("": '
        "none); the models are named crosses_0, crosses_1, ... by their place here. Only in a "
        "group without joins or negative sampling, whose feedback each model hashes its way.",
        examples=[["", "site&hour", "site&hour,site&device"]],
    )
    base: SweepBase = Field(
        default_factory=SweepBase,
        description="What every model of the grid has besides the swept values (its group "
        "is the path's).",
    )
    promotion: PolicyBody | None = Field(
        None, description="Also give the group this promotion policy (absent: keep its own)."
    )

    @model_validator(mode="after")
    def _bounded(self) -> SweepRequest:
        if not self.grid and not self.crosses:
            raise ValueError("grid names no hyper-parameter: give at least one with its values")
        combinations = math.prod(len(values) for values in self.grid.values())
        combinations *= len(self.crosses or [None])
        if combinations > MOST_SWEPT:
            raise ValueError(
                f"grid has {combinations} combinations; a sweep creates at most {MOST_SWEPT}"
            )
        return self


class SweptModel(BaseModel):
    name: str = Field(examples=["ctr-alpha_0.05-l1_1"])
    created: bool = Field(description="False: it existed already with this configuration.")


class SweepResponse(BaseModel):
    """The grid's models, in the grid's order."""

    group: str = Field(examples=["ctr"])
    models: list[SweptModel]


class StandingResponse(BaseModel):
    """A challenger against the serving model since the serving model last changed."""

    model: str = Field(examples=["ctr-alpha_0.05-l1_1"])
    paired_examples: int = Field(description="Examples both models learned.")
    relative_gain: float = Field(
        description="How much lower the challenger's progressive log loss is (0.01: 1%)."
    )
    lower_bound: float | None = Field(
        description="The test's lower bound on the mean score per /learn call; above 0 "
        "(with enough examples) the challenger is promoted. Null before two pairs."
    )

    @classmethod
    def of(cls, standing: Standing) -> StandingResponse:
        return cls(
            model=standing.model,
            paired_examples=standing.paired_examples,
            relative_gain=standing.relative_gain,
            lower_bound=standing.lower_bound,
        )


class PromotionRecord(BaseModel):
    """A promotion the group's policy made."""

    id: str = Field(description="When (a stream id: milliseconds since the epoch, then a count).")
    promoted: str = Field(examples=["ctr-alpha_0.05-l1_1"])
    replaced: str = Field(examples=["champion"])
    paired_examples: int
    champion_logloss: float
    challenger_logloss: float

    @classmethod
    def of(cls, record: dict[str, str]) -> PromotionRecord:
        return cls(
            id=record["id"],
            promoted=record["to"],
            replaced=record["from"],
            paired_examples=int(record["examples"]),
            champion_logloss=float(record["champion_logloss"]),
            challenger_logloss=float(record["challenger_logloss"]),
        )
