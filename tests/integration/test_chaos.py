"""The chaos suite's bounded form: worker SIGKILLs, a Redis stall and two Redis restarts under
feeding, and not one accepted example doubled or lost (``make chaos`` runs the full form)."""

from __future__ import annotations

import pytest

from loadtests.chaos import chaos


@pytest.mark.timeout(120)
def test_chaos_loses_and_doubles_nothing() -> None:
    summary = chaos.run(kills=3, stall_s=2.0, every_s=1.0, pause_s=1.0)
    assert summary.failures == [], summary.render()
    assert summary.kills == 3
    assert summary.feed.accepted > 0
    assert summary.feed.answers_503 > 0, "the stall should have been answered 503"
    assert summary.feed.max_503_s <= chaos.BOUND_503_S
