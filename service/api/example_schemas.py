"""What the bodies of ``/predict`` and ``/learn`` share: an example's fields and their
bounds, the label, the prediction id, the importance weight, and the shapes a body may take.

Types and static bounds are checked by pydantic (in its compiled core, so the hot path runs no
Python per feature); the limits that come from settings are checked by
:class:`service.api.limits.Limits`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    JsonValue,
    Strict,
    StringConstraints,
)

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


def whole_number(value: object) -> object:
    """JSON Schema's integers include ``1.0``: a whole float is the integer it equals."""
    return int(value) if type(value) is float and value.is_integer() else value


# whole_number runs first (the outermost annotation), then the strict check: true/false and "1" are
# refused, 1.0 is 1.
Label = Annotated[
    int,
    Strict(),
    Field(ge=0, le=1, description="1: clicked, 0: not clicked."),
    BeforeValidator(whole_number),
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


#: What a body with neither or both of ``features`` and ``examples`` is told.
ONE_SHAPE_MESSAGE = "send either 'features' (one example) or 'examples' (a list of them), not both"
#: The error type of a body with neither or both of ``features`` and ``examples``.
ONE_SHAPE = "one_shape"
#: The union tags; pydantic puts them in error locations, where messages.py drops them.
SINGLE, BATCH, JOIN, JOINS = "single", "batch", "join", "joins"

FEATURES: dict[str, JsonValue] = {
    "site": "news.example",
    "hour": 14.0,
    "tags": ["sports", "mobile"],
}
OTHER_FEATURES: dict[str, JsonValue] = {"site": "blog.example", "hour": 9.0}


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


def body_shape(body: Any) -> str | None:
    """Which request shape a body is: exactly one of ``features`` and ``examples``."""
    if isinstance(body, dict):
        single, batch = "features" in body, "examples" in body
        return None if single == batch else SINGLE if single else BATCH
    if isinstance(body, BaseModel):
        return SINGLE if getattr(body, "single", False) else BATCH
    return None
