"""Request and response bodies, named by direction.

Types and static bounds are checked by pydantic (in its compiled core, so the hot path runs no
Python per feature); the limits that come from settings are checked by
:class:`service.api.limits.Limits`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Strict,
    StringConstraints,
    Tag,
    TypeAdapter,
)

from online_ctr.learning.explain import DEFAULT_TOP
from online_ctr.learning.features import Example
from online_ctr.store.keys import MODEL_NAME
from online_ctr.store.model_config import PolicyBody
from service.api.challenger_schemas import PromotionRecord, StandingResponse

#: Longest field name and string value accepted: generous for URLs and ids, yet it bounds
#: what one feature may cost to hash and what a cached name may hold.
MAX_NAME_CHARS = 256
MAX_VALUE_CHARS = 1024

# ``=`` would make a field ``a=b`` with value ``c`` collide with field ``a`` and value ``b=c``.
FieldName = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"^[^=]+$")
]
# Strict: "1" stays a category and true is not a number.
Text = Annotated[str, Strict(), StringConstraints(max_length=MAX_VALUE_CHARS)]
#: Largest magnitude of a numeric feature: its square (the gradient's, in FTRL's ``n``) and its
#: products with weights stay far inside float range, so no model state becomes inf or NaN.
MAX_ABS_NUMBER = 1e15
Number = Annotated[
    float, Strict(), Field(allow_inf_nan=False, ge=-MAX_ABS_NUMBER, le=MAX_ABS_NUMBER)
]
FeatureValue = Text | Number | list[Text]
FeatureMap = Annotated[
    dict[FieldName, FeatureValue],
    Field(
        min_length=1,
        description=(
            "field -> value: a string is the category `field=value`, a number (|x| <= 1e15) is "
            "the numeric feature `field` (0 = absent), a list of strings is one category per item."
        ),
        examples=[{"site": "news.example", "hour": 14.0, "tags": ["sports", "mobile"]}],
        json_schema_extra=lambda schema: _names_in_property_names(schema),
    ),
]


def _whole(value: object) -> object:
    """JSON Schema's integers include ``1.0``: a whole float is the integer it equals."""
    return int(value) if type(value) is float and value.is_integer() else value


# _whole runs first (the outermost annotation), then the strict check: true/false and "1" are
# refused, 1.0 is 1.
Label = Annotated[
    int,
    Strict(),
    Field(ge=0, le=1, description="1: clicked, 0: not clicked."),
    BeforeValidator(_whole),
]


PREDICTION_ID_PATTERN = r"^[A-Za-z0-9._:+/=~-]{1,128}$"
PredictionId = Annotated[
    str,
    Strict(),
    StringConstraints(pattern=PREDICTION_ID_PATTERN),
    Field(
        description="The id of a served prediction (1-128 of A-Z a-z 0-9 . _ : + / = ~ -): "
        "/predict answers it, /learn labels the prediction by it.",
        examples=["imp-7f3a9c"],
    ),
]


def _names_in_property_names(schema: dict[str, Any]) -> None:
    """Pydantic writes the field-name pattern as ``patternProperties``, which lets a name that
    does not match through with any value; ``propertyNames`` says what the API checks."""
    patterns = schema.pop("patternProperties", None)
    if patterns:
        ((pattern, values),) = patterns.items()
        schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
        schema["additionalProperties"] = values


_ONE_SHAPE = "send either 'features' (one example) or 'examples' (a list of them), not both"
#: The error type of a body with neither or both of ``features`` and ``examples``.
ONE_SHAPE = "one_shape"
#: The union tags; pydantic puts them in error locations, where messages.py drops them.
SINGLE, BATCH, JOIN, JOINS = "single", "batch", "join", "joins"
_LEARN_SHAPE = (
    f"{_ONE_SHAPE}; or, to label a served prediction, 'prediction_id' (a batch of those in "
    "'examples', not mixed with features)"
)

FEATURES: dict[str, JsonValue] = {
    "site": "news.example",
    "hour": 14.0,
    "tags": ["sports", "mobile"],
}
OTHER_FEATURES: dict[str, JsonValue] = {"site": "blog.example", "hour": 9.0}


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
    BeforeValidator(_whole),  # as Label: 516.0 is the integer 516 (the fuzzer sent it)
]


#: The largest importance weight an example may carry: with the lowest negative rate's 1e4,
#: one example's gradient is at most 1e10 times its (p - y) x.
MAX_WEIGHT = 1e6
#: An example's importance weight (McMahan et al. 2013, section 4.4).
Weight = Annotated[
    float | None,
    Strict(),
    Field(
        gt=0.0,
        le=MAX_WEIGHT,
        allow_inf_nan=False,
        description="The example's importance weight (default 1): it counts as this many "
        "examples in the gradient and in the progressive metrics; above 0, at most "
        f"{MAX_WEIGHT:g}.",
    ),
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


def _shape(body: Any) -> str | None:
    """Which request shape a body is: exactly one of ``features`` and ``examples``."""
    if isinstance(body, dict):
        single, batch = "features" in body, "examples" in body
        return None if single == batch else SINGLE if single else BATCH
    if isinstance(body, BaseModel):
        return SINGLE if getattr(body, "single", False) else BATCH
    return None


def _learn_shape(body: Any) -> str | None:
    """Which /learn shape a body is: one of ``features``, ``prediction_id`` and ``examples``,
    and a batch's items all of one kind."""
    if isinstance(body, BaseModel):
        return str(getattr(body, "tag", "")) or _shape(body)
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
_ONE_OF = Discriminator(_shape, custom_error_type=ONE_SHAPE, custom_error_message=_ONE_SHAPE)
_LEARN_ONE_OF = Discriminator(
    _learn_shape, custom_error_type=ONE_SHAPE, custom_error_message=_LEARN_SHAPE
)
PredictRequest = Annotated[
    Annotated[PredictExample, Tag(SINGLE)] | Annotated[PredictBatch, Tag(BATCH)], _ONE_OF
]
LearnRequest = Annotated[
    Annotated[LearnExample, Tag(SINGLE)]
    | Annotated[LearnBatch, Tag(BATCH)]
    | Annotated[JoinLabel, Tag(JOIN)]
    | Annotated[JoinBatch, Tag(JOINS)],
    _LEARN_ONE_OF,
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


class ModelDeletedResponse(BaseModel):
    """What ``DELETE /models/{name}`` removed."""

    name: str
    keys_deleted: int


class SnapshotImportedResponse(BaseModel):
    """The model a ``PUT /models/{name}/snapshot`` created."""

    name: str = Field(examples=["restored"])
    rule: str = Field(examples=["ftrl"])
    global_step: int = Field(description="The step the file was taken at.", examples=[120000])
    features_tracked: int = Field(examples=[18000])
    nonzero_weights: int = Field(examples=[5400])
    rows: int = Field(description="State rows the file held.", examples=[18000])


class ModelInfoResponse(BaseModel):
    """A model's rule, hyper-parameters and progress."""

    name: str = Field(examples=["default"])
    rule: str = Field(examples=["ftrl"])
    params: dict[str, float] = Field(examples=[{"alpha": 0.1, "beta": 1.0, "l1": 1.0}])
    hash_bits: int = Field(examples=[64])
    global_step: int = Field(description="Examples learned so far.", examples=[120000])
    nonzero_weights: int = Field(examples=[5400])
    features_tracked: int = Field(description="Features with state.", examples=[18000])
    progressive_logloss: float | None = Field(
        description="Mean log loss of each example predicted just before learning it, "
        "weighted by the examples' importance weights (learned_weight).",
        examples=[0.47],
    )
    stream_lag: int = Field(description="Accepted /learn entries not applied yet.", examples=[3])
    dead_letters: int = Field(examples=[0])
    numeric: str = Field(
        description="How numbers enter the model (OCTR_NUMERIC).", examples=["log_bucket"]
    )
    calibration: str = Field(
        description="Served probabilities' calibration (OCTR_CALIBRATION).", examples=["off"]
    )
    group: str | None = Field(None, description="The group it learns with, if any.")
    admission: str = Field(
        "all",
        description="Which new features get state: all, poisson:P, bloom:N or bloom:N:D "
        "(OCTR_ADMISSION).",
        examples=["all"],
    )
    negative_rate: float = Field(
        1.0,
        description="Fraction of non-clicks its /learn keeps, each weighted 1/rate (1: all).",
        examples=[1.0],
    )
    learned_weight: float = Field(
        0.0,
        description="The learned examples' total importance weight: global_step when none "
        "had a weight; with negative sampling, an estimate of the examples sent.",
        examples=[120000.0],
    )
    expire_after: int = Field(
        0,
        description="Features untouched for this many examples are deleted with their state "
        "(0: never).",
        examples=[0],
    )
    features_expired: int = Field(
        0,
        description="How many times a feature was found gone (untouched for expire_after "
        "examples): started again when met, or deleted by the learner's sweep.",
        examples=[0],
    )
    max_features: int = Field(
        0,
        description="The most features it holds (past it the least recently touched are "
        "evicted, zero weights first; 0: no budget).",
        examples=[0],
    )
    crosses: str = Field(
        "",
        description="The pairs of fields it crosses, A&B separated by commas (empty: none).",
        examples=["site&hour"],
    )
    features_evicted: int = Field(
        0,
        description="How many features its budget has evicted so far.",
        examples=[0],
    )
    features_held: int = Field(
        0,
        description="With a budget, the features it holds (of features_tracked, the others "
        "are evicted ones whose rows the learner has not deleted yet); without one, "
        "features_tracked.",
        examples=[0],
    )
    features_pending_admission: int | None = Field(
        None,
        description="With admission bloom:N, an estimate of the features waiting for "
        "admission (met, not admitted, still counted): the counting filter's fill less the "
        "admitted features it still remembers, within about 2% measured; null for other "
        "admission rules (poisson keeps nothing of the features it has not admitted).",
        examples=[120000],
    )
    base_rate: str = Field(
        "off",
        description="The base-rate prior added to every logit: mean, decay:H or off "
        "(OCTR_BASE_RATE; models created before it existed have off).",
        examples=["mean"],
    )
    base_rate_logit: float = Field(
        0.0,
        description="What the prior adds to the next prediction's logit: the log-odds of "
        "(clicks + 1/2) / (examples + 1) over the examples learned (decayed with decay:H), "
        "each counted by its importance weight; 0 with off.",
        examples=[-4.6],
    )
    click_rate: float | None = Field(
        None,
        description="The base rate's clicks over its examples (decayed with decay:H; "
        "importance-weighted); null before the first example.",
        examples=[0.0095],
    )
    calibration_ratio: float | None = Field(
        None,
        description="sum(p) / sum(y) over every example learned, importance-weighted: the "
        "predicted clicks over the clicks (1 is calibrated; above 1 over-predicts). Each "
        "example's p is the one predicted before learning it (the served one for a joined "
        "impression). null before the first click.",
        examples=[1.004],
    )
    recent_calibration_ratio: float | None = Field(
        None,
        description="calibration_ratio over the recent window: each example's p and y "
        "counted with a share halved every 10,000 examples learned after it. null before a "
        "click.",
        examples=[0.998],
    )
    state_bytes: int = Field(
        0,
        description="Redis memory its feature state takes, in bytes: the bucket hashes "
        "(64 measured with MEMORY USAGE, their bytes per feature scaled to the features "
        "tracked) and the existence filters.",
        examples=[35000000],
    )


class ModelSummary(BaseModel):
    """A model, as ``GET /models`` lists it."""

    name: str = Field(examples=["default"])
    rule: str = Field(examples=["ftrl"])
    group: str | None = Field(None, description="The group it learns with, if any.")
    own: bool = Field(description="The service's own model (OCTR_MODEL).", examples=[True])


class GroupResponse(BaseModel):
    """A group of models that learn the same feedback."""

    name: str = Field(examples=["ctr"])
    models: list[str] = Field(examples=[["champion", "challenger"]])
    serving: str = Field(description="The model that answers /predict.", examples=["champion"])
    split: dict[str, float] = Field(
        description="Traffic shares of requests with a split_key (empty: all to serving).",
        examples=[{"champion": 0.9, "challenger": 0.1}],
    )
    join_window_s: int = Field(examples=[0])
    unlabeled: str = Field(examples=["negative"])
    promotion: PolicyBody | None = Field(
        None,
        description="When a challenger replaces the serving model by itself (null: only by "
        "PUT /groups/{name}).",
    )


class GroupDetailResponse(GroupResponse):
    """A group, with what its promotion policy found."""

    challengers: list[StandingResponse] = Field(
        description="Each challenger's standing against the serving model (empty without a policy)."
    )
    promotions: list[PromotionRecord] = Field(
        description="The last promotions the policy made, newest first."
    )


class GroupUpdate(BaseModel):
    """Which model of a group serves, and how requests with a ``split_key`` are split."""

    model_config = ConfigDict(extra="forbid")

    serving: str = Field(
        pattern=MODEL_NAME.pattern,
        description="The model that answers /predict: a model of the group.",
        examples=["challenger"],
    )
    split: (
        dict[
            Annotated[str, StringConstraints(pattern=MODEL_NAME.pattern)],
            Annotated[float, Field(gt=0, allow_inf_nan=False)],
        ]
        | None
    ) = Field(
        None,
        description="model -> positive weight; a request's split_key picks a model with "
        "probability weight / sum, stably. {}: no split. Absent: keep the current one.",
        examples=[{"champion": 0.5, "challenger": 0.5}],
    )


class ModelListResponse(BaseModel):
    """Every model and group of the service."""

    models: list[ModelSummary]
    groups: list[GroupResponse]


class HealthResponse(BaseModel):
    """The process is alive."""

    status: Literal["ok"] = "ok"


class ReadyResponse(BaseModel):
    """Redis answers and a worker has sent a heartbeat recently."""

    ready: bool = True
    heartbeat_age_s: float = Field(examples=[0.8])
    log_rollback: str | None = Field(
        default=None,
        description="The last time a learner found the model's log side gone back behind its "
        "state shards (a failover to a lagging replica): what was lost and that learning went "
        "on (docs/redis-cluster.md). Kept in the model's meta until the model is deleted or "
        "replaced; null if it never happened. Readiness is unaffected: learning goes on.",
        examples=[None],
    )
    shard_rollback: str | None = Field(
        default=None,
        description="The last time a learner found state shards behind the last commit that "
        "wrote to them, the redo log trimmed past it (a shard's failover to a lagging replica "
        "with OCTR_REPLICA_ACKS=0): which shards lost updates. Kept like log_rollback; null if "
        "it never happened.",
        examples=[None],
    )


class FieldError(BaseModel):
    """One invalid part of a request."""

    field: str = Field(examples=["examples[2].features.price"])
    message: str = Field(examples=["must be a finite number, not NaN or Infinity"])


class ErrorResponse(BaseModel):
    """What every error answers; ``errors`` lists the invalid fields of a 422."""

    detail: str
    errors: list[FieldError] | None = None


#: What each error status means, for the OpenAPI document.
ERROR_MEANINGS = {
    404: "No such model here.",
    408: "The body did not arrive within OCTR_BODY_TIMEOUT_S (e.g. shorter than its "
    "Content-Length).",
    409: "The Idempotency-Key was used for other examples; or (joins) a prediction_id "
    "already used for a prediction or twice in one batch, or a label repeated or too late.",
    413: "The body is larger than OCTR_MAX_BODY_BYTES.",
    415: "The body is not declared JSON, or has a Content-Encoding (send it uncompressed).",
    422: "Invalid request: not UTF-8, not JSON, nested too deeply, a lone surrogate, not "
    "exactly one of `features` and `examples`, or a field out of bounds; `errors` names each. "
    "A key repeated in one JSON object is not refused: its last value counts.",
    503: "Redis is unavailable; retry after Retry-After seconds.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error statuses."""
    return {
        status: {"model": ErrorResponse, "description": ERROR_MEANINGS[status]}
        for status in statuses
    }
