"""What ``/predict`` takes and answers, named by direction."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Strict,
    Tag,
    TypeAdapter,
)

from online_ctr.learning.explain import DEFAULT_TOP
from online_ctr.learning.features import Example
from service.api.example_schemas import (
    BATCH,
    FEATURES,
    ONE_SHAPE,
    ONE_SHAPE_MESSAGE,
    OTHER_FEATURES,
    SINGLE,
    FeatureMap,
    PredictionId,
    body_shape,
    whole_number,
)

#: The opt-in for McMahan et al.'s per-prediction uncertainty.
Uncertainty = Annotated[
    bool,
    Strict(),
    Field(
        description="true: answer each prediction's `uncertainty` too, sum_i |x_i| eta_i, a "
        "bound on how far the next update can move its logit (docs/concepts/rules.md)."
    ),
]


#: The opt-in for each prediction's logit in parts (online_ctr.learning.explain).
Explain = Annotated[
    bool,
    Strict(),
    Field(
        description="true: answer each prediction's `explanation` too: its logit (before any "
        "calibration) as the bias plus one term weight * x per feature, the largest first."
    ),
]
#: Most terms an explanation lists: an example's features are bounded anyway, this bounds
#: the answer's size per example.
MAX_EXPLAIN_TOP = 1000
ExplainTop = Annotated[
    int,
    Strict(),
    Field(
        ge=1,
        le=MAX_EXPLAIN_TOP,
        description=f"With `explain`: how many terms to list (1-{MAX_EXPLAIN_TOP}), the largest "
        "|contribution| first; the others are summed in `rest`.",
    ),
    BeforeValidator(whole_number),  # as Label: 516.0 is the integer 516 (the fuzzer sent it)
]


SplitKey = Annotated[
    str | None,
    Strict(),
    Field(
        min_length=1,
        max_length=256,
        description="For a group with a traffic split: a key of the caller's (a user id, "
        "say) whose stable hash picks the model that answers; the same key, the same model.",
        examples=["user-1234"],
    ),
]


class PredictItem(BaseModel):
    """One example of a batch to score."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"features": FEATURES}]}
    )
    features: FeatureMap
    prediction_id: PredictionId | None = Field(
        None,
        description="With joins on (OCTR_JOIN_WINDOW_S > 0): this prediction's id, new per "
        "impression (one used before, or twice in a batch, is a 409); without one the service "
        "makes one. Send it to /learn with the label, unless the answer's prediction_id is "
        "null (not logged).",
    )


class PredictExample(PredictItem):
    """One example to score."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"features": FEATURES},
                {"features": FEATURES, "uncertainty": True},
                {"features": FEATURES, "explain": True, "explain_top": 3},
            ]
        },
    )
    single: ClassVar[bool] = True
    uncertainty: Uncertainty = False
    explain: Explain = False
    explain_top: ExplainTop = DEFAULT_TOP
    split_key: SplitKey = None

    def rows(self) -> list[Example]:
        """The example's features, as a one-row list."""
        return [self.features]

    def ids(self) -> list[str | None] | None:
        """The caller's prediction id, if it sent one."""
        return None if self.prediction_id is None else [self.prediction_id]


class PredictBatch(BaseModel):
    """Several examples to score, answered in order."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"examples": [{"features": FEATURES}, {"features": OTHER_FEATURES}]}]
        },
    )
    single: ClassVar[bool] = False
    examples: Annotated[list[PredictItem], Field(min_length=1)]
    uncertainty: Uncertainty = False
    explain: Explain = False
    explain_top: ExplainTop = DEFAULT_TOP
    split_key: SplitKey = None

    def rows(self) -> list[Example]:
        """The examples' features, in order."""
        return [example.features for example in self.examples]

    def ids(self) -> list[str | None] | None:
        """The caller's prediction ids (None where it sent none), or None if it sent none."""
        ids = [example.prediction_id for example in self.examples]
        return None if all(i is None for i in ids) else ids


#: The discriminator: in OpenAPI a ``oneOf``, so the schema itself says "exactly one of".
_ONE_OF = Discriminator(
    body_shape, custom_error_type=ONE_SHAPE, custom_error_message=ONE_SHAPE_MESSAGE
)
PredictRequest = Annotated[
    Annotated[PredictExample, Tag(SINGLE)] | Annotated[PredictBatch, Tag(BATCH)], _ONE_OF
]
#: For validating a request outside FastAPI (load tests, tools).
PREDICT_REQUEST: TypeAdapter[PredictRequest] = TypeAdapter(PredictRequest)


_CALIBRATED = (
    "Whether `probability` is calibrated (OCTR_CALIBRATION=power: gamma * sigmoid(logit)^kappa "
    "fitted online); false: it is sigmoid(logit)."
)


class Term(BaseModel):
    """One feature's part of a logit."""

    feature: str = Field(
        description="The feature as the model saw it: `field=value` for a category (one per "
        "item of a list); for a number, `field=bucket` with OCTR_NUMERIC=log_bucket (x = 1), "
        "or `field` with raw (x = the number).",
        examples=["site=news.example"],
    )
    number: float | None = Field(
        None, description="For a number: the value sent (absent for a category).", examples=[14.0]
    )
    x: float = Field(description="The feature's value in the model.", examples=[1.0])
    weight: float = Field(description="Its weight, as this prediction read it.", examples=[0.8])
    contribution: float = Field(description="weight * x: its part of the logit.", examples=[0.8])


class Explanation(BaseModel):
    """A prediction's logit in parts: bias + base_rate + the listed contributions + rest =
    logit (up to float rounding). It explains the logit, before any calibration: with
    `calibrated: true` the probability is a monotone function of sigmoid(logit), not
    sigmoid(logit) itself."""

    bias: float = Field(
        description="The bias's weight (x = 1): the logit of an example without features.",
        examples=[-3.1],
    )
    base_rate: float = Field(
        0.0,
        description="The model's base-rate prior: the log-odds of its click rate so far, added "
        "to every logit (0 for a model whose base_rate is off).",
        examples=[-4.6],
    )
    features: list[Term] = Field(
        description="The `explain_top` largest terms by |contribution|, largest first (ties "
        "in the order sent)."
    )
    rest: float = Field(description="The sum of the terms not listed (0 if none).", examples=[0.0])
    omitted: int = Field(description="How many terms `rest` sums.", examples=[0])


class Prediction(BaseModel):
    """The click probability for one example, the model's logit and, if asked, uncertainty."""

    probability: float = Field(description="P(click), in (0, 1).", examples=[0.031])
    logit: float = Field(
        description="The model's score, before any calibration; sigmoid(logit) is the "
        "uncalibrated probability.",
        examples=[-3.44],
    )
    uncertainty: float | None = Field(
        None,
        description="With `uncertainty: true`: sum_i |x_i| eta_i over the example's features.",
        examples=[0.27],
    )
    explanation: Explanation | None = Field(
        None, description="With `explain: true`: the logit in parts. Absent otherwise."
    )
    prediction_id: str | None = Field(
        None,
        description="With joins on: this prediction's id, to send to /learn with its label; "
        "null when its impression was not logged (the model, or its group, holds "
        "OCTR_MAX_PENDING_IMPRESSIONS impressions waiting for labels, or Redis is at its "
        "memory limit): the score stands, and a label sent for it is refused as unknown. "
        "Absent with joins off.",
        examples=["Zk3v0cQxR2m8yT1uWb5a9g"],
    )


class PredictResponse(Prediction):
    """The prediction for a single example."""

    model: str = Field(examples=["default"])
    calibrated: bool = Field(description=_CALIBRATED, examples=[False])


class PredictBatchResponse(BaseModel):
    """The predictions for several examples, in request order."""

    predictions: list[Prediction]
    model: str = Field(examples=["default"])
    calibrated: bool = Field(description=_CALIBRATED, examples=[False])
