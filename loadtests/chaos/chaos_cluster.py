"""Chaos on Redis Cluster (issue 37): the real API and two workers on a local cluster of 3
masters + 3 replicas (node timeout 1 s), while clients feed uniquely tagged examples and retry
every 503 with the same ``Idempotency-Key`` (:class:`loadtests.chaos.chaos_parts.Feeders`).

Each scenario runs on the emptied, whole cluster with a fresh API and workers, once per
``OCTR_REPLICA_ACKS`` setting; then feeding stops, the stream drains, and every accepted tag is
found learned once, twice or not at all (:func:`loadtests.chaos.chaos_parts.audit`), beside the
model's ``t``:

- ``log-kill``: SIGKILL of the master of the model's log side (stream, idempotency records,
  ``t``), restarted once its replica took over; ``log-kill-lagging``: the same, its replica
  frozen (SIGSTOP) for ``--lag-s`` beforehand and thawed right after the kill, so that it is
  promoted while behind;
- ``state-kill`` and ``state-kill-lagging``: the same for a master holding only state shards;
- ``log-stop``: the log-side master SIGSTOPped beyond the node timeout (its replica promoted),
  then SIGCONT;
- ``left-down``: the log-side master killed and never restarted: learning must resume
  without restarting any process;
- ``lease-kills``: the lease-holding worker SIGKILLed ``--kills`` times (restarted each time).

A loss is an accepted example with no state; it is *after the failover* when the attempt
that got its 202 was sent after the fault began (a dead or frozen master cannot have
written it). Exit status 1 on any doubling, on any loss with acknowledgements on,
on a loss after the failover with them off, on ``t`` short of the accepted examples with
them on, on a 500, or when ingest or learning did not resume.

    python -m loadtests.chaos.chaos_cluster                       # every scenario, acks 0 and 1
    python -m loadtests.chaos.chaos_cluster --acks 1 --scenarios log-kill-lagging,left-down
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import redis

from loadtests.chaos.chaos_cluster_parts import (
    Fault,
    Faults,
    Roles,
    StepWatch,
    cluster_client,
    longest_gap,
    read_lease,
    roles,
    rollback_reported,
    rollbacks_counted,
    service_on,
)
from loadtests.chaos.chaos_parts import Audit, Feeders, FeedLog, Learners, audit
from loadtests.common.processes import http_ok, wait_until
from testkit.local_cluster import LocalCluster

SHARDS = 64
SETTINGS = {
    "OCTR_STATE_SHARDS": str(SHARDS),
    "OCTR_LEASE_TTL_MS": "1000",
    "OCTR_REDIS_TIMEOUT_S": "0.5",
    "OCTR_HEARTBEAT_INTERVAL_S": "0.2",
    "OCTR_BATCH_WAIT_MS": "20",
    "OCTR_REDIS_WAIT_S": "60",
}


@dataclass(frozen=True)
class Timing:
    """How long each phase of a scenario lasts."""

    lead_s: float = 4.0  # feeding before the fault
    after_s: float = 8.0  # feeding after the fault (and the failover) is over
    lag_s: float = 8.0  # a replica frozen before its master is killed
    stop_s: float = 3.0  # a master SIGSTOPped
    kills: int = 5  # SIGKILLs of the lease holder
    every_s: float = 1.5  # between them
    per_request: int = 20  # examples per /learn request (fewer: a shorter audit)
    patience_s: float = 20.0  # the feeders' last requests retried at most this long


#: The bounded form the tests run.
BOUNDED = Timing(2.0, 4.0, 3.0, 3.0, kills=3, every_s=1.0, per_request=4, patience_s=8.0)


@dataclass
class Scene:
    """What a scenario acts on."""

    cluster: LocalCluster
    faults: Faults
    roles: Roles
    learners: Learners
    timing: Timing


def _kill(side: str, lag: bool, scene: Scene) -> Fault:
    """A master SIGKILLed (its replica lagging if ``lag``), restarted once replaced."""
    port = scene.roles.log_side if side == "log" else scene.roles.state_only
    fault = scene.faults.kill_master(port, scene.timing.lag_s if lag else 0.0)
    time.sleep(1.0)
    scene.cluster.heal()
    return fault


def _stop(scene: Scene) -> Fault:
    return scene.faults.stop_master(scene.roles.log_side, scene.timing.stop_s)


def _left_down(scene: Scene) -> Fault:
    return scene.faults.kill_master(scene.roles.log_side)


def _lease_kills(scene: Scene) -> Fault:
    fault = Fault(time.monotonic())
    stack = scene.learners.stack
    for _ in range(scene.timing.kills):
        # Both workers up and one leading before each kill: a standby still starting (seconds
        # on a busy machine) would stall learning by the suite's doing, not the service's.
        wait_until(lambda: all(map(http_ok, stack.worker_metrics.values())), 60, "workers")
        time.sleep(scene.timing.every_s)
        scene.learners.kill_leader(patience_s=60.0)
    return fault


SCENARIOS: dict[str, Callable[[Scene], Fault]] = {
    "log-kill": partial(_kill, "log", False),
    "log-kill-lagging": partial(_kill, "log", True),
    "state-kill": partial(_kill, "state", False),
    "state-kill-lagging": partial(_kill, "state", True),
    "log-stop": _stop,
    "left-down": _left_down,
    "lease-kills": _lease_kills,
}


@dataclass(frozen=True)
class Outcome:
    """One scenario under one setting: what the clients saw, what the cluster holds."""

    scenario: str
    acks: int
    feed: FeedLog
    result: Audit
    fault: Fault
    #: Longest time without an accepted attempt / a change of ``t``, from the last one before
    #: the fault (:func:`longest_gap`): a frozen replica's time before a kill counts.
    ingest_stall_s: float
    learn_stall_s: float
    rollbacks: int  # the log's and the shards' rollbacks counted by the running workers
    reported: str | None  # /readyz's log_rollback, or else its shard_rollback
    alive: bool  # no process of the service exited

    @property
    def accepted(self) -> int:
        return len(self.feed.accepted_tags)

    @property
    def doubled(self) -> int:
        return max(self.result.tags_doubled, self.result.t - self.accepted)

    @property
    def lost(self) -> int:
        return self.result.tags_lost

    def _sent_at(self) -> dict[str, float]:
        return {tag: at for at, tags in self.feed.accepted_at for tag in tags}

    @property
    def lost_after(self) -> int:
        """Lost examples accepted by an attempt sent after the fault began."""
        sent_at = self._sent_at()
        return sum(sent_at[tag] > self.fault.at for tag in self.result.lost)

    @property
    def loss_window_s(self) -> float:
        """How long before the fault the earliest lost example was accepted (0: none lost)."""
        sent_at = self._sent_at()
        return max((self.fault.at - sent_at[tag] for tag in self.result.lost), default=0.0)

    @property
    def failures(self) -> list[str]:
        """Every way the run fell short; empty if none."""
        # With acks off, a failover to a lagging replica may lose examples accepted just
        # before it, or learn them twice (commits that went back with the log side while the
        # shards kept their effect), but never silently.
        said = bool(self.rollbacks or self.reported)
        checks = {
            f"{self.doubled} doubled": self.doubled == 0 or (self.acks == 0 and said),
            f"{self.lost} lost, not reported": self.lost == 0 or said,
            f"{self.lost} lost with acks on": self.acks == 0 or self.lost == 0,
            f"{self.lost_after} lost after the failover": self.lost_after == 0,
            f"t={self.result.t} with acks on": self.acks == 0 or self.result.t == self.accepted,
            "ingest did not resume": math.isfinite(self.ingest_stall_s),
            "learning did not resume": math.isfinite(self.learn_stall_s),
            "a process exited": self.alive,
            f"unexpected answers: {self.feed.unexpected[:2]}": not self.feed.unexpected,
        }
        return [message for message, ok in checks.items() if not ok]


def _settled_audit(cluster: LocalCluster, feed: FeedLog, timeout_s: float = 60.0) -> Audit:
    """The audit once the stream is empty and the result has stopped changing (a loss never
    settles to zero; a last commit being applied does)."""
    deadline = time.monotonic() + timeout_s
    last: tuple[int, int, int] | None = None
    since = time.monotonic()
    result: Audit | None = None
    while True:
        with contextlib.suppress(redis.RedisError, KeyError), cluster_client(cluster) as client:
            result = audit(client, feed.accepted_tags)
        if result is not None and result.stream_left == 0:
            if result.tags_lost == result.tags_doubled == 0:
                return result
            now = (result.t, result.tags_lost, result.tags_doubled)
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= 2.0:
                return result
        if time.monotonic() > deadline:
            if result is None:
                raise RuntimeError("the cluster never answered the audit")
            return result
        time.sleep(0.5)


def run_scenario(
    cluster: LocalCluster, name: str, acks: int, timing: Timing, work_dir: Path
) -> Outcome:
    """One scenario on ``cluster`` (healed and emptied first) with ``OCTR_REPLICA_ACKS=acks``."""
    cluster.heal()
    cluster.flushall()
    logs = work_dir / f"{name}-acks{acks}"
    logs.mkdir(parents=True, exist_ok=True)
    faults = Faults(cluster)
    with service_on(cluster, logs, **SETTINGS, OCTR_REPLICA_ACKS=str(acks)) as stack:
        api_url = stack.start_api()
        learners = Learners(stack, partial(read_lease, cluster))
        learners.start()
        wait_until(lambda: http_ok(f"{api_url}/readyz"), 60, "a worker's heartbeat")
        scene = Scene(cluster, faults, roles(cluster, SHARDS), learners, timing)
        with (
            StepWatch(cluster) as watch,
            Feeders(api_url, per_request=timing.per_request) as feeders,
        ):
            try:
                time.sleep(timing.lead_s)
                fault = SCENARIOS[name](scene)
                time.sleep(timing.after_s)
            finally:
                faults.thaw_all()
            # A setting that refuses every write for good must not hang the suite: requests
            # unanswered by then are counted abandoned (neither accepted nor known not to be).
            feeders.stop(timing.patience_s)
            ended = time.monotonic()
        alive = all(process.poll() is None for process in stack.children.values())
        result = _settled_audit(cluster, feeders.log)
        sent = [at for at, _ in feeders.log.accepted_at]
        return Outcome(
            scenario=name,
            acks=acks,
            feed=feeders.log,
            result=result,
            fault=fault,
            ingest_stall_s=longest_gap(sent, fault.at, ended),
            learn_stall_s=longest_gap(watch.advances(), fault.at, ended),
            rollbacks=rollbacks_counted(stack),
            reported=rollback_reported(api_url),
            alive=alive,
        )


HEADER = (
    f"{'scenario':<19}{'acks':>4}{'accepted':>9}{'once':>7}{'doubled':>8}{'missing':>8}"
    f"{'after':>6}{'window':>7}{'t':>7}{'promoted':>9}{'ingest':>7}{'learn':>7}  rollback"
)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if math.isinf(value) else f"{value:.1f}s"


def render_row(outcome: Outcome) -> str:
    result = outcome.result
    said = "readyz" if outcome.reported else "-"
    return (
        f"{outcome.scenario:<19}{outcome.acks:>4}{outcome.accepted:>9}"
        f"{result.tags_once:>7}{outcome.doubled:>8}{outcome.lost:>8}{outcome.lost_after:>6}"
        f"{_seconds(outcome.loss_window_s if outcome.lost else None):>7}{result.t:>7}"
        f"{_seconds(outcome.fault.promoted_s):>9}{_seconds(outcome.ingest_stall_s):>7}"
        f"{_seconds(outcome.learn_stall_s):>7}  {outcome.rollbacks} {said}"
    )


def render(outcomes: list[Outcome]) -> str:
    """The table, then one line per scenario that fell short."""
    lines = [HEADER, *(render_row(outcome) for outcome in outcomes)]
    lines.append(
        "missing: accepted tags with no state; after: of them, sent after the fault began; "
        "window: how long before the fault the earliest was accepted; promoted: the replica a "
        "master after the fault; ingest/learn: longest time without a 202 / a change of t, "
        "from the last one before the fault (a frozen replica's time counts: with acks on it "
        "refuses writes); rollback: online_ctr_log_rollbacks_total and "
        "online_ctr_shard_rollbacks_total, and whether /readyz reports one"
    )
    for outcome in outcomes:
        if outcome.feed.abandoned:
            lines.append(
                f"NOTE {outcome.scenario} acks={outcome.acks}: {outcome.feed.abandoned} "
                "requests never answered 202 (given up on at the end)"
            )
        if outcome.failures:
            short = "; ".join(outcome.failures)
            lines.append(f"FAILED {outcome.scenario} acks={outcome.acks}: {short}")
    lines.append("FAILED" if any(outcome.failures for outcome in outcomes) else "OK")
    return "\n".join(lines)


def run(
    scenarios: list[str], acks: list[int], timing: Timing, cluster: LocalCluster | None = None
) -> list[Outcome]:
    """Every scenario under every setting, on ``cluster`` or on one started for the run (its
    logs and the service's are kept in a directory printed on stderr)."""
    work_dir = Path(tempfile.mkdtemp(prefix="octr-chaos-cluster-"))
    print(f"logs in {work_dir}", file=sys.stderr)
    with contextlib.ExitStack() as stack:
        if cluster is None:
            cluster = stack.enter_context(LocalCluster(work_dir / "cluster"))
        outcomes = []
        for name in scenarios:
            for setting in acks:
                outcome = run_scenario(cluster, name, setting, timing, work_dir)
                print(render_row(outcome), file=sys.stderr, flush=True)
                outcomes.append(outcome)
        return outcomes


def _names(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown scenarios {unknown}; known: {list(SCENARIOS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acks", default="0,1", help="OCTR_REPLICA_ACKS values (default 0,1)")
    parser.add_argument("--scenarios", type=_names, default=list(SCENARIOS), help="comma list")
    parser.add_argument("--lag-s", type=float, default=Timing.lag_s, help="replica frozen")
    parser.add_argument("--kills", type=int, default=Timing.kills, help="lease-holder kills")
    parser.add_argument("--bounded", action="store_true", help="the tests' shorter phases")
    args = parser.parse_args(argv)
    timing = BOUNDED if args.bounded else replace(Timing(), lag_s=args.lag_s, kills=args.kills)
    acks = [int(value) for value in args.acks.split(",")]
    outcomes = run(args.scenarios, acks, timing)
    print(render(outcomes))
    return 1 if any(outcome.failures for outcome in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
