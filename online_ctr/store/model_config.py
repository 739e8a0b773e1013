"""What a model is, as an admin gives it: the body of ``PUT /models/{name}`` and the registry's
record of every model.

The default model of a service is described by its settings (``OCTR_RULE``, ...); every other
model by one of these, validated like the settings but with errors that name the body's fields.

>>> config = ModelConfig(rule="ftrl", alpha=0.05, group="ctr")
>>> spec = config.spec("challenger")
>>> spec.rule.name, spec.params.alpha, spec.group
('ftrl', 0.05, 'ctr')
>>> ModelConfig(rule="rda", alpha=0.1)
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig
  Value error, alpha not used by rule 'rda'; leave it out ...
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from online_ctr.config.checks import (
    HYPER_PARAMETERS,
    MAX_JOIN_WINDOW_S,
    check_encoding,
    check_power_of_two,
    rule_params,
)
from online_ctr.config.join_policy import JoinPolicy
from online_ctr.config.settings import Settings
from online_ctr.learning import eviction, retention
from online_ctr.learning.admission import PATTERN as ADMISSION_PATTERN
from online_ctr.learning.admission import Admission
from online_ctr.learning.base_rate import MEAN, BaseRate
from online_ctr.learning.base_rate import SETTING as BASE_RATE_SETTING
from online_ctr.learning.crosses import MOST_CROSSES, crosses_text, parse_crosses
from online_ctr.learning.promotion import PromotionPolicy
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.sampling import MIN_RATE
from online_ctr.store.keys import valid_model_name
from online_ctr.store.state import ModelSpec, spec_from

#: What ``crosses`` takes: the text ``a&b,c&d`` or a list of ``a&b`` (kept as the text).
_CROSSES_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}


class JoinConfig(BaseModel):
    """How predictions wait for their labels (``join_window_s`` 0: they are not logged)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    join_window_s: int = Field(
        0,
        ge=0,
        le=MAX_JOIN_WINDOW_S,
        description="Seconds a served prediction waits for its label by prediction_id; 0: "
        "predictions are not logged.",
    )
    unlabeled: Literal["negative", "drop"] = Field(
        "negative",
        description="What happens to a prediction still unlabeled when its window closes: "
        "learned as a negative, or dropped (counted either way).",
    )

    def policy(self) -> JoinPolicy:
        """The join policy these settings describe."""
        return JoinPolicy(self.join_window_s, self.unlabeled)


class ModelConfig(JoinConfig):
    """A model's rule, hyper-parameters, hashing, state layout and group."""

    rule: str = Field("ftrl", description=f"Learning rule: {', '.join(sorted(RULES))}.")
    alpha: float | None = None
    beta: float | None = None
    l1: float | None = None
    l2: float | None = None
    gamma: float | None = None
    theta: float | None = None
    k: int | None = None
    hash_bits: int | None = Field(None, ge=1, le=64, description="Hashing-trick bits; unset: 64.")
    numeric: Literal["log_bucket", "raw"] = "log_bucket"
    calibration: Literal["off", "power"] = "off"
    state_buckets: int = 1 << 18
    state_shards: int = 64
    state_encoding: Literal["float64", "compact"] = "float64"
    group: str | None = Field(
        None,
        description="The group whose feedback this model learns (created with its first "
        "model); a model's group is fixed when it is created.",
    )
    admission: str = Field(
        "all",
        pattern=ADMISSION_PATTERN,
        description="Which new features get state: all; poisson:P (admitted with probability "
        "P at each occurrence); bloom:N (at the N-th occurrence, counted in a counting Bloom "
        "filter); bloom:N:D (its counts halved every D examples, forgetting ids that do not "
        "recur). Until admitted a feature contributes 0 and its gradient is dropped.",
        examples=["all", "bloom:2", "bloom:2:100000", "poisson:0.03"],
    )
    expire_after: int = Field(
        0,
        ge=0,
        le=retention.MOST,
        description=retention.SETTING,
        examples=[0, 1000000],
    )
    max_features: int = Field(
        0,
        ge=0,
        le=eviction.MOST,
        description=eviction.SETTING,
        examples=[0, 10000000],
    )
    base_rate: str = Field(
        MEAN.text,
        description=BASE_RATE_SETTING,
        examples=["mean", "decay:100000", "off"],
    )
    negative_rate: Annotated[float, Strict()] = Field(
        1.0,
        ge=MIN_RATE,
        le=1.0,
        allow_inf_nan=False,
        description="Fraction of non-clicks /learn keeps, by a hash of the example (every "
        "click is kept); each kept one is weighted 1/rate, so the model and its progressive "
        "log loss still estimate the whole stream's. Shared by every model of a group.",
    )
    crosses: Annotated[str, WithJsonSchema(_CROSSES_SCHEMA)] = Field(
        "",
        description=f"Pairs of fields to cross (at most {MOST_CROSSES}), A&B separated by "
        "commas, or a list of A&B: an example with both fields gets one more feature, named "
        "a=va&b=vb, learned like any other. Empty: none.",
        examples=["", "site&hour,site&device"],
    )
    feature_names: bool = Field(
        False,
        description="Record the names of the model's features as the API hashes them (at "
        "most OCTR_FEATURE_NAMES_MAX), so that GET /models/{name}/weights names its weights.",
    )

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, value: str) -> str:
        get_rule(value)
        return value

    @field_validator("admission", mode="before")
    @classmethod
    def _admission(cls, value: object) -> object:
        # Before the pattern: a bad rule is told what is wrong, a good one written as
        # Admission.text writes it (which the pattern describes).
        return Admission.parse(value).text if isinstance(value, str) else value

    @field_validator("base_rate")
    @classmethod
    def _base_rate(cls, value: str) -> str:
        return BaseRate.parse(value).text

    @field_validator("crosses", mode="before")
    @classmethod
    def _crosses(cls, value: object) -> object:
        # A list of A&B or the comma-separated text, kept as the canonical text.
        if isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(item, str) for item in value)
        ):
            return crosses_text(parse_crosses(value))
        return value

    @field_validator("group")
    @classmethod
    def _group_name(cls, value: str | None) -> str | None:
        if value is not None and not valid_model_name(value):
            raise ValueError("use 1-64 of A-Z a-z 0-9 _ . - (starting with a letter or digit)")
        return value

    @field_validator("state_buckets", "state_shards")
    @classmethod
    def _power_of_two(cls, value: int, info: Any) -> int:
        # At most 2048 shards: a commit's redo entry has a field per shard (Lua's arguments).
        return check_power_of_two(value, 2048 if info.field_name == "state_shards" else 1 << 24)

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        if self.state_shards > self.state_buckets:
            raise ValueError("state_shards cannot exceed state_buckets")
        self.params()
        check_encoding(self.state_encoding, self.rule, ("state_encoding", "rule"))
        retention.check_encoding(
            self.expire_after, self.state_encoding, ("expire_after", "state_encoding")
        )
        retention.check_encoding(
            self.max_features, self.state_encoding, ("max_features", "state_encoding")
        )
        retention.check_one_bound(self.expire_after, self.max_features)
        return self

    def hyper_parameters(self) -> dict[str, Any]:
        """The hyper-parameters that were given, by name."""
        values = {name: getattr(self, name) for name in HYPER_PARAMETERS}
        return {name: value for name, value in values.items() if value is not None}

    def params(self) -> Any:
        """The rule's hyper-parameter dataclass."""
        return rule_params(self.rule, self.hyper_parameters())

    def join(self) -> JoinConfig:
        """Only the join settings (shared by every model of a group)."""
        return JoinConfig(join_window_s=self.join_window_s, unlabeled=self.unlabeled)

    def spec(self, name: str) -> ModelSpec:
        """The :class:`ModelSpec` of the model ``name`` so configured."""
        return spec_from(
            name,
            self.rule,
            self.params(),
            self.hash_bits,
            self.state_buckets,
            self.state_shards,
            self.state_encoding,
            self.numeric,
            self.calibration,
            self.group,
            self.admission,
            self.expire_after,
            self.max_features,
            self.base_rate,
            crosses=self.crosses,
        )


def config_of(spec: ModelSpec) -> ModelConfig:
    """The configuration that describes ``spec`` (a model imported from a snapshot)."""
    return ModelConfig(
        rule=spec.rule.name,
        **vars(spec.params),
        hash_bits=spec.hash_bits,
        numeric=spec.numeric,
        calibration=spec.calibration,
        state_buckets=spec.buckets,
        state_shards=spec.shards,
        state_encoding=spec.encoding,
        group=spec.group,
        admission=spec.admission.text,
        expire_after=spec.expire_after,
        max_features=spec.max_features,
        base_rate=spec.base_rate.text,
        crosses=crosses_text(spec.crosses),
    )


def own_config(settings: Settings) -> ModelConfig:
    """The configuration of the model ``OCTR_MODEL`` that ``settings`` describe."""
    return ModelConfig(
        rule=settings.rule,
        **settings.hyper_parameters(),
        hash_bits=settings.hash_bits,
        numeric=settings.numeric,
        calibration=settings.calibration,
        state_buckets=settings.state_buckets,
        state_shards=settings.state_shards,
        state_encoding=settings.state_encoding,
        join_window_s=settings.join_window_s,
        unlabeled=settings.unlabeled,
        negative_rate=settings.negative_rate,
        admission=settings.admission,
        expire_after=settings.expire_after,
        max_features=settings.max_features,
        base_rate=settings.base_rate,
        crosses=settings.crosses,
        feature_names=settings.feature_names,
    )


def _whole(value: object) -> object:
    """JSON Schema's integers include ``1000.0``: a whole float is the integer it equals."""
    return int(value) if type(value) is float and value.is_integer() else value


#: The most a policy's counts can be: Redis's Lua (cjson) writes numbers with 14 significant
#: digits, so a larger count would not read back as itself (2**53 came back as 9.007199254741e15).
MOST_COUNT = 10**12
#: Strict, so that ``false`` and ``"0.1"`` are refused as the schema says, not read as numbers;
#: a whole float is still an integer (:func:`_whole` runs first).
_Ratio = Annotated[float, Strict(), Field(allow_inf_nan=False)]
_Count = Annotated[int, Strict(), Field(ge=1, le=MOST_COUNT), BeforeValidator(_whole)]


class PolicyBody(BaseModel):
    """A group's promotion policy, as the API and the registry hold it."""

    model_config = ConfigDict(extra="forbid")

    margin: _Ratio = Field(
        0.001,
        ge=0.0,
        lt=1.0,
        description="How much lower (relative) the challenger's progressive log loss must be.",
    )
    confidence: _Ratio = Field(
        0.95,
        ge=0.5,
        lt=1.0,
        description="1 - the chance that the group ever promotes a model not better by the margin.",
    )
    min_examples: _Count = Field(1_000, description="Paired examples a challenger needs at least.")
    planned_units: _Count = Field(
        10_000, description="The test is most sensitive near this many pairs."
    )

    def policy(self) -> PromotionPolicy:
        return PromotionPolicy(**self.model_dump())
