"""Checks shared by the settings (``OCTR_*``) and a model's stored configuration
(:mod:`online_ctr.store.model_config`): each raises ValueError with a message the caller
words as its own (setting or field names)."""

from __future__ import annotations

from typing import Any

from online_ctr.learning.compact import RULES as COMPACT_RULES
from online_ctr.learning.rules import get_rule

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
