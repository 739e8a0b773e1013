"""The cluster chaos suite's bounded form (``make chaos-cluster`` runs every scenario under
both settings): the log-side master killed while its replica lags, and a master killed and
left down, each under the retrying feeders, audited by unique tags and ``t``. With replicated
acknowledgements (``OCTR_REPLICA_ACKS=1``) nothing accepted may be lost or doubled, and
learning resumes with no process restarted."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtests.chaos import chaos_cluster
from testkit.local_cluster import LocalCluster


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario", ["log-kill-lagging", "left-down"])
def test_a_failover_loses_nothing_accepted(
    scenario: str, redis_cluster: LocalCluster, redis_cluster_url: str, tmp_path: Path
) -> None:
    outcome = chaos_cluster.run_scenario(
        redis_cluster, scenario, 1, chaos_cluster.BOUNDED, tmp_path
    )
    table = chaos_cluster.render([outcome])
    assert outcome.accepted > 0 and outcome.fault.promoted_s is not None, table
    assert outcome.failures == [], table
    assert (outcome.lost, outcome.doubled, outcome.result.t) == (0, 0, outcome.accepted), table


@pytest.mark.timeout(120)
def test_without_acks_a_lagging_state_failover_loses_only_what_it_reports(
    redis_cluster: LocalCluster, redis_cluster_url: str, tmp_path: Path
) -> None:
    outcome = chaos_cluster.run_scenario(
        redis_cluster, "state-kill-lagging", 0, chaos_cluster.BOUNDED, tmp_path
    )
    table = chaos_cluster.render([outcome])
    # Nothing sent after the fault lost, nothing doubled, and a loss (accepted during the
    # replica's freeze) never silent: online_ctr_shard_rollbacks_total and /readyz say it.
    assert outcome.failures == [], table
    assert outcome.lost == 0 or (outcome.rollbacks and outcome.reported), table
