"""The options of ``online-ctr models create`` and ``models promote``, read into what the
registry takes: a :class:`ModelConfig` and a traffic split.

Values are validated by :class:`ModelConfig` itself (as the body of ``PUT /models/{name}``
is), so the command and the API accept exactly the same models; a refusal is one line naming
the option and exit status 2, the status of a command-line mistake.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import sys
from collections.abc import Mapping
from typing import Any, NoReturn

from pydantic import ValidationError

from online_ctr.config.checks import HYPER_PARAMETERS
from online_ctr.store.model_config import ModelConfig

#: The ``ModelConfig`` fields ``models create`` sets, each an option of the same name.
CONFIG_FIELDS = (
    "rule",
    *HYPER_PARAMETERS,
    "hash_bits",
    "numeric",
    "calibration",
    "group",
    "join_window_s",
    "unlabeled",
    "admission",
    "expire_after",
    "max_features",
    "base_rate",
    "negative_rate",
    "crosses",
)
#: Fields ``ModelConfig`` takes strictly as numbers (the API's JSON gives them so): read here.
NUMBERS = ("negative_rate",)
#: The choices of the options that have a few, shown in ``--help``.
CHOICES = {
    "numeric": ("log_bucket", "raw"),
    "calibration": ("off", "power"),
    "unlabeled": ("negative", "drop"),
}
#: Field names a check across fields may name, said as their options (not ``rule`` or
#: ``group``: English words a message may use as such).
_NAMED = (*HYPER_PARAMETERS, "hash_bits", "expire_after", "max_features", "negative_rate")
_PARAMETER_NAME = re.compile(rf"(?<![\w'-])(?:{'|'.join(_NAMED)})(?![\w'])")


def usage_error(message: str) -> NoReturn:
    """Stop with ``message`` as one line on stderr and exit status 2 (a mistake in the
    command line, as argparse's own)."""
    print(f"online-ctr: {message}", file=sys.stderr)
    raise SystemExit(2)


def option(field: str) -> str:
    """The option of a configuration field: ``hash_bits`` -> ``--hash-bits``."""
    return "--" + field.replace("_", "-")


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """Add one option per configuration field; values stay strings for ModelConfig to
    check, so that every refusal reads the same."""
    for field in CONFIG_FIELDS:
        choices = CHOICES.get(field)
        metavar = "{" + ",".join(choices) + "}" if choices else field.upper()
        parser.add_argument(option(field), dest=field, metavar=metavar, required=field == "rule")
    parser.add_argument(
        "--feature-names",
        action="store_true",
        help="record the names of the model's features (at most OCTR_FEATURE_NAMES_MAX), so "
        "that `models weights` can name its weights",
    )


def config_from_args(args: argparse.Namespace) -> ModelConfig:
    """The configuration the options describe; exit status 2 with one line if invalid."""
    given: dict[str, Any] = {
        f: getattr(args, f) for f in CONFIG_FIELDS if getattr(args, f) is not None
    }
    for field in NUMBERS:
        # Not given, or not a number: left for ModelConfig to say so.
        with contextlib.suppress(KeyError, ValueError):
            given[field] = float(given[field])
    if getattr(args, "feature_names", False):
        given["feature_names"] = True
    try:
        return ModelConfig.model_validate(given)
    except ValidationError as error:
        usage_error("; ".join(_describe(e) for e in error.errors(include_url=False)))


def _describe(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:  # a check across fields: its message names the rule's parameters
        return _PARAMETER_NAME.sub(lambda m: option(m[0]), message)
    got = error.get("input")
    shown = f" (got {got!r})" if isinstance(got, str) and repr(got) not in message else ""
    return f"{option(str(error['loc'][0]))}: {message[:1].lower()}{message[1:]}{shown}"


def parse_split(text: str) -> dict[str, float]:
    """``a=0.9,b=0.1`` as ``{"a": 0.9, "b": 0.1}``; exit status 2 unless every weight is a
    positive finite number and every model named once."""
    split: dict[str, float] = {}
    for item in text.split(","):
        name, sep, weight = item.partition("=")
        name = name.strip()
        if not sep or not name:
            usage_error(f"--split: give MODEL=WEIGHT pairs separated by commas, got {item!r}")
        if name in split:
            usage_error(f"--split: model {name!r} is given twice")
        split[name] = _weight(name, weight)
    return split


def _weight(name: str, text: str) -> float:
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not (math.isfinite(weight) and weight > 0):
        usage_error(
            f"--split: the weight of {name!r} must be a positive finite number, got {text!r}"
        )
    return weight
