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

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from octr.joins import JoinPolicy
from octr.store.keys import valid_model_name
from octr.store.state import ModelSpec, spec_from
from online_ctr.compact import RULES as COMPACT_RULES
from online_ctr.rules import RULES, get_rule

#: Hyper-parameters, by the name the rules' dataclasses use.
HYPER_PARAMETERS = ("alpha", "beta", "l1", "l2", "gamma", "theta", "k")
#: The most a join window can be: a week.
MAX_JOIN_WINDOW_S = 7 * 86_400


def rule_params(rule_name: str, given: dict[str, Any]) -> Any:
    """The rule's hyper-parameter dataclass from ``given``; ValueError naming what is unused
    or invalid (by the rules' names: callers rename them to their settings or fields)."""
    rule = get_rule(rule_name)
    params = rule.params(**given)
    unused = sorted(set(given) - set(vars(params)))
    if unused:
        raise ValueError(f"{', '.join(unused)} not used by rule {rule_name!r}; leave it out")
    return params


def check_power_of_two(value: int, limit: int) -> int:
    """``value`` if a power of two up to ``limit``; ValueError otherwise."""
    if value < 1 or value & (value - 1) or value > limit:
        raise ValueError(f"must be a power of two up to {limit}, got {value}")
    return value


def check_encoding(encoding: str, rule: str, names: tuple[str, str]) -> None:
    """Refuse the compact encoding for a rule it cannot hold; ``names`` are what the caller
    calls the encoding and the rule (setting or field names)."""
    if encoding == "compact" and rule not in COMPACT_RULES:
        raise ValueError(
            f"{names[0]}=compact supports {names[1]} {' and '.join(COMPACT_RULES)}, not "
            f"{rule!r} (its state holds a step or an unscaled sum)"
        )


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

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, value: str) -> str:
        get_rule(value)
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
    )
