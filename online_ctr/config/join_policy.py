"""Joining late clicks to the predictions they follow: the policy, and the outcomes of a join.

A served prediction (an *impression*) waits ``window_s`` seconds for its click, sent to
``/learn`` by prediction id. Clicked in time, it is learned with label 1; when the window
closes unclicked, it is learned as a negative (``unlabeled="negative"``) or dropped
(``"drop"``). Nobody sends a "no": the window closing is the no.

>>> JoinPolicy(600).on, JoinPolicy(0).on
(True, False)
>>> outcome("3"), late_detail("4")[-36:]
('late', 'late labels are counted, not learned')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Unlabeled = Literal["negative", "drop"]
Outcome = Literal["learned", "unknown", "repeated", "late"]

#: Most ``window_s``: a week.
MAX_WINDOW_S = 7 * 86_400
#: The one-character outcome codes of join.lua, by what they mean.
OUTCOMES: dict[str, Outcome] = {
    "0": "learned",
    "1": "unknown",
    "2": "repeated",
    "3": "late",
    "4": "late",
}
#: How to turn joins on, for the answers of a model without them.
TURN_ON = (
    "joins are off for this model: set OCTR_JOIN_WINDOW_S to how many seconds a prediction "
    "waits for its click (e.g. 3600) to turn them on"
)


@dataclass(frozen=True)
class JoinPolicy:
    """How long an impression waits for its label, and what it becomes without one."""

    window_s: int
    unlabeled: Unlabeled = "negative"

    def __post_init__(self) -> None:
        if not 0 <= self.window_s <= MAX_WINDOW_S:
            raise ValueError(f"window_s must be 0 to {MAX_WINDOW_S}, got {self.window_s}")
        if self.unlabeled not in ("negative", "drop"):
            raise ValueError(f"unlabeled must be 'negative' or 'drop', not {self.unlabeled!r}")

    @property
    def on(self) -> bool:
        """Whether predictions are logged for joins (a window of 0 turns joins off)."""
        return self.window_s > 0

    @property
    def window_ms(self) -> int:
        return 1000 * self.window_s

    @property
    def late_code(self) -> str:
        """The outcome code of a label whose window closed before the sweep came by."""
        return "3" if self.unlabeled == "negative" else "4"


#: Joins off: what a model without a policy has.
JOINS_OFF = JoinPolicy(0)


def outcome(code: str) -> Outcome:
    """The outcome a join.lua code stands for."""
    return OUTCOMES[code]


def late_detail(code: str) -> str:
    """Why a late label was refused: what became of its impression."""
    became = "was learned as a negative" if code == "3" else "was dropped"
    return (
        f"its window closed without a click and it {became}; late labels are counted, not learned"
    )


def detail(prediction_id: str, code: str) -> str:
    """A sentence for a refused label."""
    if code == "1":
        return (
            f"prediction {prediction_id!r} is unknown: never served with joins on, or its "
            "window closed long ago"
        )
    if code == "2":
        return f"prediction {prediction_id!r} is already labelled; a label counts once"
    return f"prediction {prediction_id!r} came too late: {late_detail(code)}"
