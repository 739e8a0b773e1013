"""Finding the model's log side gone back behind its state shards, and going on from there.

On Redis Cluster the log side (meta, stream, redo log: one slot) and the state shards (other
slots, other nodes) fail over apart. A failover to a replica that lagged takes the log side
back (commit 565 to 547, say) while the shards keep the commits they applied. New commits then
reuse numbers 548-565; a shard skipping every commit not after its ``applied`` would drop them.
So a shard's ``applied`` is a stamp, commit number and log *generation*
(:func:`online_ctr.store.shards.stamp`), and a learner taking over checks, before it replays
the redo log, where the shards are:

- a shard ahead of the log (same generation and a later commit, or a later generation: a
  generation move itself lost) means the log went back. The learner says so in one log line,
  counts it (``online_ctr_log_rollbacks_total``), records it in the meta (``/readyz`` shows
  it as ``log_rollback``), moves the generation past every stamp (``generation.lua``, fenced),
  and restamps every shard with it, at the lower of its commit and the log's: a shard has every
  commit of the log up to there. The redo replay then brings each shard up to the log, and new
  commits are applied everywhere;
- a shard stamped with an earlier generation than the log's is one a learner that moved the
  generation did not restamp before it died: restamped the same way, silently.

The shards fail over on their own too. A shard's master that dies before its replica has an
apply takes the apply with it, and once the redo log was trimmed past that commit nothing can
bring it back (with ``OCTR_REPLICA_ACKS`` on, the redo log is trimmed only past replicated
applies, so this cannot happen). The log side keeps, per shard, the last commit that wrote to
it (``touched``, set by ``finalize.lua``), and each redo entry the commit that wrote to each of
its shards before it (``prior``). Before the redo log's replay, a shard must hold the commit
before the first entry that writes to it, or, if none does, its last. One that does not went
back: :func:`check_shards` says so the same ways (one log line,
``online_ctr_shard_rollbacks_total``, ``shard_rollback`` in the meta and ``/readyz``) and
stamps it where the log says it is, so that it is said once. Its lost updates stay lost: the
features it holds are as of an earlier commit, and learning goes on from them.

What a rollback loses, and what is kept: commits after the log's last are gone from the log
(their redo entries, their counts in ``t``, their stream deletions). Their state stays in the
shards that had applied them, and learning goes on from the shards as they are; a shard that
had not applied one of them never gets it. Feedback accepted only on the lost side is gone;
entries those commits learned that are back in the stream are learned again.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter
from redis.exceptions import RedisError

from online_ctr.store.commits import Pending
from online_ctr.store.stamps import Positions, move_generation, positions, restamp, touched
from online_ctr.store.state import ModelStore

logger = logging.getLogger(__name__)


class LogMovedError(RedisError):
    """The log moved (another learner, or the lease lost) while this one checked it: the
    learner starts over, as after any Redis trouble."""


async def check_log(store: ModelStore, fence: str, rollbacks: Counter) -> int:
    """The log generation to apply commits under, after repairing a rollback if the shards
    are ahead of the log (see the module doc); ``rollbacks`` is the model's counter."""
    found = await positions(store)
    ahead = found.ahead()
    gen = found.gen
    if ahead:
        gen = max(found.gen, *(found.shards[i][1] for i in ahead)) + 1
        report = _report(store, found, ahead, gen)
        status = await move_generation(store, fence, found.seq, gen, report)
        if status != "ok":
            raise LogMovedError(f"the log moved while checked ({status}); starting over")
        logger.error("%s", report)
        rollbacks.inc()
    stale = [i for i, (_, stamped) in enumerate(found.shards) if stamped != gen]
    if stale:
        await restamp(store, {i: (min(found.shards[i][0], found.seq), gen) for i in stale})
    return gen


async def check_shards(
    store: ModelStore, gen: int, pending: list[Pending], rollbacks: Counter
) -> None:
    """Report and restamp the shards lacking a commit the redo log no longer holds (see the
    module doc); run before the replay of ``pending``, under log generation ``gen``."""
    found = await positions(store)
    required = await touched(store)
    for commit in reversed(pending):  # the first entry that writes to a shard wins
        required.update({shard: commit.prior.get(shard, 0) for shard, _ in commit.runs})
    behind = {
        index: required[index]
        for index, (seq, _) in enumerate(found.shards)
        if seq < required.get(index, 0)
    }
    if not behind:
        return
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report = (
        f"model {store.spec.name!r}: {len(behind)} of {len(found.shards)} state shards went back "
        f"(a failover to a lagging replica?): at {when} shards "
        f"{', '.join(str(i) for i in sorted(behind))} lack commits up to {max(behind.values())} "
        "that the redo log no longer holds; their features are as of earlier commits, and "
        "learning goes on from them (OCTR_REPLICA_ACKS prevents this)"
    )
    await restamp(store, {index: (seq, gen) for index, seq in behind.items()}, report)
    logger.error("%s", report)
    rollbacks.inc()


def _report(store: ModelStore, found: Positions, ahead: list[int], gen: int) -> str:
    """The one line saying what was found and what follows."""
    newest = max(found.shards[i][0] for i in ahead)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return (
        f"model {store.spec.name!r}: the log side went back (a failover to a lagging replica?): "
        f"at {when} it ends at commit {found.seq} (generation {found.gen}) while {len(ahead)} of "
        f"{len(found.shards)} state shards hold later commits (up to {newest}); the log's lost "
        f"commits and the feedback accepted only with them are gone, their state stays in the "
        f"shards that applied it; new commits go on in log generation {gen}"
    )
