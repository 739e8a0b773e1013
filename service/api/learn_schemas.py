"""What ``/learn`` takes (labelled examples, or labels of served predictions by their id)
and answers, named by direction."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
)

from online_ctr.learning.features import Example
from service.api.example_schemas import (
    BATCH,
    FEATURES,
    JOIN,
    JOINS,
    ONE_SHAPE,
    ONE_SHAPE_MESSAGE,
    OTHER_FEATURES,
    SINGLE,
    FeatureMap,
    Label,
    PredictionId,
    Weight,
    body_shape,
)

_LEARN_SHAPE = (
    f"{ONE_SHAPE_MESSAGE}; or, to label a served prediction, 'prediction_id' (a batch of those "
    "in 'examples', not mixed with features)"
)


class LearnExample(BaseModel):
    """One labelled example."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"features": FEATURES, "label": 1}]}
    )
    single: ClassVar[bool] = True
    features: FeatureMap
    label: Label
    weight: Weight = None

    def rows(self) -> list[Example]:
        """The example's features, as a one-row list."""
        return [self.features]

    def labels(self) -> list[int]:
        """The example's label, as a one-item list."""
        return [self.label]

    def weights(self) -> list[float] | None:
        """The example's importance weight, as a one-item list; None if it has none."""
        return None if self.weight is None else [self.weight]


class LearnBatch(BaseModel):
    """Several labelled examples."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "examples": [
                        {"features": FEATURES, "label": 1},
                        {"features": OTHER_FEATURES, "label": 0},
                    ]
                }
            ]
        },
    )
    single: ClassVar[bool] = False
    examples: Annotated[list[LearnExample], Field(min_length=1)]

    def rows(self) -> list[Example]:
        """The examples' features, in order."""
        return [example.features for example in self.examples]

    def labels(self) -> list[int]:
        """The examples' labels, in order."""
        return [example.label for example in self.examples]

    def weights(self) -> list[float] | None:
        """The examples' importance weights (1 where one has none); None if none has one."""
        if all(example.weight is None for example in self.examples):
            return None
        return [1.0 if e.weight is None else e.weight for e in self.examples]


class JoinLabel(BaseModel):
    """The label of a served prediction, by its id."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"prediction_id": "imp-7f3a9c", "label": 1}]},
    )
    tag: ClassVar[str] = JOIN
    single: ClassVar[bool] = True
    prediction_id: PredictionId
    label: Label

    def pairs(self) -> tuple[list[str], list[int]]:
        """The prediction ids and their labels."""
        return [self.prediction_id], [self.label]


class JoinBatch(BaseModel):
    """Several labels of served predictions, joined in order."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "examples": [
                        {"prediction_id": "imp-1", "label": 1},
                        {"prediction_id": "imp-2", "label": 0},
                    ]
                }
            ]
        },
    )
    tag: ClassVar[str] = JOINS
    single: ClassVar[bool] = False
    examples: Annotated[list[JoinLabel], Field(min_length=1)]

    def pairs(self) -> tuple[list[str], list[int]]:
        """The prediction ids and their labels, in order."""
        return [e.prediction_id for e in self.examples], [e.label for e in self.examples]


def _learn_shape(body: Any) -> str | None:
    """Which /learn shape a body is: one of ``features``, ``prediction_id`` and ``examples``,
    and a batch's items all of one kind."""
    if isinstance(body, BaseModel):
        return str(getattr(body, "tag", "")) or body_shape(body)
    if not isinstance(body, dict):
        return None
    given = [name for name in ("features", "prediction_id", "examples") if name in body]
    if len(given) != 1:
        return None
    if given[0] != "examples":
        return SINGLE if given[0] == "features" else JOIN
    items = body["examples"]
    joins = (
        {isinstance(i, dict) and "prediction_id" in i for i in items}
        if isinstance(items, list)
        else {False}
    )
    if len(joins) > 1:
        return None
    return JOINS if joins == {True} else BATCH


#: The discriminator: in OpenAPI a ``oneOf``, so the schema itself says "exactly one of".
_LEARN_ONE_OF = Discriminator(
    _learn_shape, custom_error_type=ONE_SHAPE, custom_error_message=_LEARN_SHAPE
)
LearnRequest = Annotated[
    Annotated[LearnExample, Tag(SINGLE)]
    | Annotated[LearnBatch, Tag(BATCH)]
    | Annotated[JoinLabel, Tag(JOIN)]
    | Annotated[JoinBatch, Tag(JOINS)],
    _LEARN_ONE_OF,
]


class Rejected(BaseModel):
    """A label of a batch that was not learned, and why."""

    index: int = Field(description="Its place in `examples`.", examples=[2])
    prediction_id: str = Field(examples=["imp-7f3a9c"])
    reason: Literal["unknown", "repeated", "late"] = Field(
        description="unknown: no such prediction served with joins on (or long ago); "
        "repeated: already labelled; late: its window had closed (it was learned as a "
        "negative, or dropped); late labels are counted, not learned.",
        examples=["late"],
    )
    detail: str


class LearnResponse(BaseModel):
    """How many examples were appended to the model's feedback stream; for labels sent by
    `prediction_id`, also those refused (`rejected`, empty when every label was learned;
    only in the answer to a batch of them)."""

    accepted: int = Field(examples=[1])
    rejected: list[Rejected] | None = Field(None, examples=[[]])
