"""The registry of online learning rules, by the names the command line and service use.

>>> sorted(RULES)
['fobos', 'ftrl', 'l1sgd', 'rda', 'tg', 'truncation']
"""

from __future__ import annotations

from online_ctr.learning.rules import fobos, ftrl, l1sgd, rda, tg, truncation
from online_ctr.learning.rules.base import Rule

RULES: dict[str, Rule] = {
    module.RULE.name: module.RULE for module in (ftrl, rda, fobos, tg, truncation, l1sgd)
}


def get_rule(name: str) -> Rule:
    """The rule called ``name``, or a ``ValueError`` listing the names there are."""
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(
            f"unknown rule {name!r}; choose one of {', '.join(sorted(RULES))}"
        ) from None


__all__ = ["RULES", "Rule", "get_rule"]
