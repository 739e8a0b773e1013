"""The abuse suite's bounded form (issue 33): every attack of ``loadtests.chaos.abuse`` for a few
seconds against the real API, worker and Redis, with the suite's small limits.

Each attack must leave the API's peak RSS within 1.2x its configured bound (the sum of
docs/limits.md), each store within its limit, and every request of the victim, a client with a
key sending single /predict requests beside the attack, answered 200. ``make abuse`` runs the
same attacks for 60 s each and reports latencies; nothing here depends on timing.
"""

from __future__ import annotations

import pytest

from loadtests.chaos import abuse

SECONDS = 4.0
#: What each store may hold at the suite's limits.
HELD_LIMITS = {
    "idempotency records": int(abuse.LIMITS["OCTR_MAX_IDEMPOTENCY_KEYS"]),
    "pending impressions": int(abuse.LIMITS["OCTR_MAX_PENDING_IMPRESSIONS"]),
    "name-table bytes": int(abuse.LIMITS["OCTR_NAME_TABLE_BYTES"]),
    "copy features": int(abuse.LIMITS["OCTR_PREDICT_CACHE_FEATURES"]),
}


@pytest.mark.timeout(600)
def test_every_attack_stays_within_its_bounds_and_the_victim_is_answered() -> None:
    _, base_rss, outcomes = abuse.run(list(abuse.ATTACKS), SECONDS, warm_s=2.0)
    assert [outcome.attack for outcome in outcomes] == list(abuse.ATTACKS)
    for outcome in outcomes:
        assert outcome.peak_rss <= 1.2 * outcome.bound, (outcome.attack, outcome.peak_rss)
        assert outcome.victim_requests > 0, outcome.attack
        assert not outcome.victim_failures, (outcome.attack, outcome.victim_failures[:3])
        for store, most in HELD_LIMITS.items():
            # The idempotency and impression gauges sum the four models' tags; the tables'
            # budgets are one for all models.
            per_tag = store in ("idempotency records", "pending impressions")
            limit = most * (len(abuse.MODELS) if per_tag else 1)
            assert outcome.held.get(store, 0) <= limit, (outcome.attack, store)
    # How far each attack got depends on the machine; that it got somewhere does not.
    held = {outcome.attack: outcome.held for outcome in outcomes}
    assert held["impressions"]["pending impressions"] > 0
    assert held["names"]["name-table bytes"] > 0
    assert base_rss > 0
