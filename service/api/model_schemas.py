"""What ``/models`` and ``/groups`` answer (a model's information, the list of models and
groups) and what ``PUT /groups/{name}`` takes."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
)

from online_ctr.store.keys import MODEL_NAME
from online_ctr.store.model_config import PolicyBody
from service.api.challenger_schemas import PromotionRecord, StandingResponse


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
