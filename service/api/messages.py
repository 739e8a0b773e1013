"""Pydantic's validation errors rewritten as ``field path -> plain message`` a person can act on.

Pydantic reports a feature value that fits none of string / number / list once per member of
that union; those reports are merged here into the one message that matches what was sent.
This runs only when a request is invalid, so valid requests pay nothing for it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from service.api.example_schemas import (
    BATCH,
    JOIN,
    JOINS,
    MAX_ABS_NUMBER,
    MAX_NAME_CHARS,
    MAX_VALUE_CHARS,
    ONE_SHAPE,
    SINGLE,
)

_SOURCES = ("body", "query", "path", "header")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_\-]+$")
_SHOWN_NAME_CHARS = 40
_VALUE_KINDS = "must be a string, a finite number or a list of strings"
#: A JSON string with a lone UTF-16 surrogate escape (``"\\ud800"``) is no Unicode text.
_SURROGATE = "contains a lone surrogate escape (like \\ud800), which is not valid Unicode text"
_NAME_MESSAGES = {
    "string_too_short": "field names must not be empty",
    "string_pattern_mismatch": "field names must not contain '=' (it separates field and value)",
    "string_too_long": f"field names are limited to {MAX_NAME_CHARS} characters",
    "string_unicode": f"field names must be valid text: this one {_SURROGATE}",
}
_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "is not a field of this request",
    "too_short": "must not be empty",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
    "model_attributes_type": "must be a JSON object",
    "list_type": "must be a list",
}

Loc = Sequence[str | int]


def field_errors(errors: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``[{"field": path, "message": text}]``, one entry per invalid field, in request order."""
    found: dict[str, str] = {}
    values: dict[str, list[Mapping[str, Any]]] = {}
    for error in errors:
        loc = _strip_source(error["loc"])
        split = _feature_value(loc)
        if split is None:
            found.setdefault(*_explain(loc, error))
        elif split[1] == ["[key]"]:
            message = _NAME_MESSAGES.get(error["type"], error["msg"])
            found.setdefault(_path(split[0]), message)
        else:
            # Keep the slot so fields stay in request order; filled in below.
            found.setdefault(_path(split[0]), "")
            values.setdefault(_path(split[0]), []).append(error)
    for path, group in values.items():
        del found[path]
        found.update(_explain_value(path, group))
    return [{"field": path, "message": message} for path, message in found.items()]


def summary(errors: list[dict[str, str]], limit: int = 3) -> str:
    """One sentence naming the first few invalid fields."""
    parts = [f"{error['field']}: {error['message']}" for error in errors[:limit]]
    more = len(errors) - limit
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def unparseable_body(body: bytes) -> str:
    """Why a body that FastAPI's JSON parser raised on cannot be read: what to fix."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return (
            f"is not valid UTF-8 (byte 0x{body[error.start]:02x} at offset {error.start}); "
            "send JSON encoded as UTF-8"
        )
    try:
        json.loads(text)
    except RecursionError:
        return "nests too deeply to parse; a request needs at most 5 levels of nesting"
    except ValueError as error:
        return f"is not valid JSON ({error})"
    return "could not be parsed as JSON; send one JSON object encoded as UTF-8"


def _strip_source(loc: Loc) -> list[str | int]:
    """The location inside the body, without "body" and the request shape's union tag."""
    inside = list(loc[1:] if loc and loc[0] in _SOURCES else loc)
    return inside[1:] if inside[:1] in ([SINGLE], [BATCH], [JOIN], [JOINS]) else inside


def _feature_value(loc: list[str | int]) -> tuple[list[str | int], list[str | int]] | None:
    """Split an error under a feature into (path to the feature, the rest) if it is one."""
    for start in (0, 2):
        if len(loc) > start + 2 and loc[start] == "features":
            if start == 2 and loc[0] != "examples":
                return None
            return loc[: start + 2], loc[start + 2 :]
    return None


def _explain(loc: list[str | int], error: Mapping[str, Any]) -> tuple[str, str]:
    kind = error["type"]
    if kind == "json_invalid":
        reason = error.get("ctx", {}).get("error", "malformed")
        return "body", f"is not valid JSON ({reason} at character {loc[0] if loc else 0})"
    if loc and loc[-1] == "label" and kind not in ("missing", "extra_forbidden"):
        return _path(loc), "must be 0 or 1 (a number, not true/false or a string)"
    if kind == ONE_SHAPE:
        return _shape_message(error.get("input"), str(error["msg"]))
    if kind == "value_error":
        message = str(error["msg"]).removeprefix("Value error, ")
        return _path(loc), message
    if kind == "missing" and not loc:
        return "body", "a JSON object is required"
    return _path(loc), _MESSAGES.get(kind, str(error["msg"]))


def _shape_message(body: object, message: str) -> tuple[str, str]:
    """Why a body has neither or both of ``features`` and ``examples``."""
    if not isinstance(body, dict):
        return "body", "must be a JSON object with 'features' or 'examples'"
    unknown = [name for name in body if name not in (*_SHAPES, "label")]
    if unknown and not set(_SHAPES) & set(body):
        return _path([unknown[0]]), "is not a field of this request; send 'features' or 'examples'"
    items = body.get("examples")
    if (
        isinstance(items, list)
        and len({isinstance(i, dict) and "prediction_id" in i for i in items}) > 1
    ):
        return "examples", (
            "mixes labels by 'prediction_id' with examples with 'features': send each kind "
            "in a request of its own"
        )
    return "body", message


#: The fields that say which shape a request is.
_SHAPES = ("features", "examples", "prediction_id")


def _explain_value(path: str, group: list[Mapping[str, Any]]) -> dict[str, str]:
    """The message(s) for one feature value from pydantic's per-union-member errors."""
    items = {
        f"{path}[{error['loc'][-1]}]": _item_message(error)
        for error in group
        if isinstance(error["loc"][-1], int)
    }
    if items:  # the value was a list: only its bad items matter
        return items
    kinds = {error["type"] for error in group}
    if "string_unicode" in kinds:
        return {path: _SURROGATE}
    if "finite_number" in kinds:
        return {path: "must be a finite number, not NaN or Infinity"}
    if "string_too_long" in kinds:
        return {path: f"is longer than {MAX_VALUE_CHARS} characters"}
    if kinds & {"less_than_equal", "greater_than_equal"}:
        return {path: f"must be between -{MAX_ABS_NUMBER:g} and {MAX_ABS_NUMBER:g}; scale it"}
    value = group[0].get("input")
    if isinstance(value, int) and not isinstance(value, bool):
        return {path: "is too large a number (beyond float range)"}
    return {path: f"{_VALUE_KINDS}, not {_describe(value)}"}


def _item_message(error: Mapping[str, Any]) -> str:
    if error["type"] == "string_unicode":
        return _SURROGATE
    if error["type"] == "string_too_long":
        return f"is longer than {MAX_VALUE_CHARS} characters"
    return f"list items must be strings, not {_describe(error.get('input'))}"


def _describe(value: object) -> str:
    """What a JSON value is, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int | float):
        return "a number"
    return type(value).__name__


def _path(loc: Sequence[str | int]) -> str:
    """``examples[2].features.site``; odd field names are quoted: ``features["a=b"]``, and
    long ones cut (the answer should not echo a 100 kB name back)."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif len(part) > _SHOWN_NAME_CHARS:
            text += f"[{json.dumps(part[:_SHOWN_NAME_CHARS] + '...')}]"
        elif _PLAIN_KEY.match(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text or "body"
