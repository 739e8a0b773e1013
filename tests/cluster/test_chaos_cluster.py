"""The cluster chaos suite's bounded form (``make chaos-cluster`` runs every scenario under
both settings): the log-side master killed while its replica lags, and a master killed and
left down, each under the retrying feeders, audited by unique tags and ``t``.

With replicated acknowledgements (``OCTR_REPLICA_ACKS=1``) nothing accepted may be lost or
doubled. A build that does not know the setting yet (issue 37, item 1) runs them off, and
only what holds without them is asserted: nothing lost after the failover, a loss of the log
side reported, learning resumed with no process restarted."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from loadtests import chaos_cluster
from tests.local_cluster import LocalCluster

pytestmark = pytest.mark.integration

ACKS = 1 if chaos_cluster.ACKS_KNOWN else 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario", ["log-kill-lagging", "left-down"])
def test_a_failover_loses_nothing_accepted(
    scenario: str, redis_cluster: LocalCluster, redis_cluster_url: str, tmp_path: Path
) -> None:
    outcome = chaos_cluster.run_scenario(
        redis_cluster, scenario, ACKS, chaos_cluster.BOUNDED, tmp_path
    )
    table = chaos_cluster.render([outcome])
    assert outcome.accepted > 0 and outcome.fault.promoted_s is not None, table
    assert outcome.lost_after == 0, table
    assert outcome.alive and not outcome.feed.unexpected, table
    assert math.isfinite(outcome.learn_stall_s), table
    if ACKS:
        assert outcome.failures == [], table
        assert (outcome.lost, outcome.doubled, outcome.result.t) == (0, 0, outcome.accepted)
    elif outcome.lost and scenario == "log-kill-lagging":
        assert outcome.rollbacks and outcome.reported, table
