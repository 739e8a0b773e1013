"""The per-request size limits that come from settings, checked after pydantic's validation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from online_ctr.learning.features import Example


class InvalidFieldError(ValueError):
    """A part of a request (a field, a header) that is not acceptable: answered 422."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class LimitExceededError(InvalidFieldError):
    """A request within the schema but over a configured size limit."""


@dataclass(frozen=True)
class Limits:
    """How many examples a request, and features an example, may hold (from settings)."""

    max_examples: int
    max_features: int

    def within(self, examples: int, most_features: int) -> bool:
        """Whether a request of ``examples`` without lists, the largest of them with
        ``most_features``, is within the limits (:meth:`check` says what is wrong if not)."""
        return examples <= self.max_examples and most_features <= self.max_features

    def check(self, rows: Sequence[Example], single: bool) -> bool:
        """Raise :class:`LimitExceededError` for the first example over a limit; else say
        whether any value is a list (the one scan of the values serves both)."""
        if len(rows) > self.max_examples:
            raise LimitExceededError(
                "examples", f"{len(rows)} examples; at most {self.max_examples} per request"
            )
        lists = False
        for index, features in enumerate(rows):
            count = len(features)
            # The types collected in C first: most examples hold no list, and a Python loop
            # over every value was 8% of a 1,000-example /learn's CPU (py-spy).
            if list in set(map(type, features.values())):
                lists = True
                # Each item of a list is a feature of its own.
                count += sum(len(v) - 1 for v in features.values() if type(v) is list)
            if count > self.max_features:
                field = "features" if single else f"examples[{index}].features"
                raise LimitExceededError(
                    field,
                    f"{count} features (list items count one each); at most "
                    f"{self.max_features} per example",
                )
        return lists
