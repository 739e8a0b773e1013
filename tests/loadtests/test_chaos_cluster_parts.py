"""The cluster chaos suite's arithmetic: how long a fault stalled a series of events, and
which lost examples were accepted before the fault and which after it."""

from __future__ import annotations

import math

from loadtests.chaos.chaos_cluster import Outcome
from loadtests.chaos.chaos_cluster_parts import Fault, longest_gap
from loadtests.chaos.chaos_parts import Audit, FeedLog


def test_the_longest_gap_counts_from_the_last_event_before_the_fault() -> None:
    assert longest_gap([1.0, 2.0, 5.0, 5.5, 9.0], since=3.0, until=8.0) == 3.0
    assert longest_gap([1.0, 3.5, 4.0], since=3.0, until=8.0) == 2.5
    assert longest_gap([4.0, 6.0], since=3.0, until=8.0) == 2.0  # nothing before: from since
    assert math.isinf(longest_gap([1.0, 2.0], since=3.0, until=8.0))  # never resumed


def outcome(lost: set[str], acks: int, rollbacks: int = 1) -> Outcome:
    feed = FeedLog(accepted_tags={"a", "b", "c", "d"})
    feed.accepted_at = [(1.0, ["a", "b"]), (4.0, ["c"]), (6.0, ["d"])]
    result = Audit(4 - len(lost), 0, 0, 4 - len(lost), 0, len(lost), 0, lost=frozenset(lost))
    return Outcome("log-kill", acks, feed, result, Fault(5.0), 1.0, 1.0, rollbacks, None, True)


def test_a_loss_is_after_the_failover_when_its_accepted_attempt_was_sent_after_the_fault() -> None:
    before = outcome({"a", "c"}, acks=0)
    assert (before.lost, before.lost_after, before.loss_window_s) == (2, 0, 4.0)
    assert before.failures == []  # before the fault, with acks off, reported: allowed
    assert outcome({"a", "c"}, acks=0, rollbacks=0).failures == ["2 lost, not reported"]
    after = outcome({"d"}, acks=0)
    assert after.lost_after == 1
    assert after.failures == ["1 lost after the failover"]
    assert outcome({"a"}, acks=1).failures == ["1 lost with acks on", "t=3 with acks on"]
