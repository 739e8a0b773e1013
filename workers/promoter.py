"""A group's promoter: pair the units its models learned, tally each challenger against the
serving model (:mod:`online_ctr.learning.promotion`), and promote one that is better by the
policy's margin with its confidence.

It runs in the worker process whose learner holds the serving model's lease, so there is one
per group; its state (per model the last unit record read, per challenger the tally) is in
Redis, written with a compare and set, so a promoter that takes over goes on where the last
one stopped. Units read but not paired yet are held in memory: a promoter that moves loses
them (they are never counted twice), which only makes the test see fewer pairs, and so does
every other unit lost (a unit record trimmed before it was read, a commit whose units were
not recorded): which units are lost does not depend on their losses, so the test stays valid.

A change of serving model by hand (``PUT /groups/{name}``) restarts the tallies against the
new one; so does a promotion, which is logged, counted and listed in ``GET /groups/{name}``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from online_ctr.learning.pairing import Units, pair
from online_ctr.learning.promotion import Paired, PromotionPolicy, alpha_each, promotes
from online_ctr.metrics import Metrics
from online_ctr.store.keys import ModelKeys
from online_ctr.store.promotion import PromoterState, Promotions, read_units, trim_units
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import GroupInfo

logger = logging.getLogger(__name__)

#: Unit records read per model and step (the learners write one per commit).
READ_RECORDS = 16
#: Units a model's report holds in memory while its partner catches up; past it the oldest
#: are dropped (a challenger whose learner is stopped must not grow the champion's).
MOST_PENDING_UNITS = 1_000_000


@dataclass
class Promoter:
    """The promoter of one group."""

    redis: RedisClient
    promotions: Promotions
    metrics: Metrics
    group: str
    #: Per model, units read and not settled yet.
    pending: dict[str, Units] = field(default_factory=dict)
    #: Per challenger, how many of the champion's pending units it has settled.
    passed: dict[str, int] = field(default_factory=dict)

    async def step(self, info: GroupInfo) -> GroupInfo | None:
        """Read, pair and tally what the group's models learned since the last step; the
        group as changed if a challenger was promoted, else None."""
        assert info.promotion is not None
        policy = info.promotion.policy()
        raw, stored = await self.promotions.state(self.group)
        state = self._current(stored, info)
        if not await self._read(state, info) and stored is state:
            return None
        challengers = [m for m in info.models if m != info.serving]
        for challenger in challengers:
            self._tally(state, challenger, policy.margin)
        self._settle(info.serving, challengers)
        held = sum(len(units) for units in self.pending.values())
        self.metrics.promoter_pending_units.labels(self.group).set(held)
        state.pairs = {c: state.pairs.get(c, Paired()) for c in challengers}
        self._publish(state)
        winner = _winner(state, policy)
        promoted = None
        if winner is not None:
            promoted = await self._promote(raw, state, winner, policy)
            if promoted is None:  # moved: the cursors were not stored, nothing is trimmed
                return None
        elif not await self.promotions.tally(self.group, raw, state):
            self.forget()  # another promoter wrote meanwhile: start from what it stored
            return None
        for model, cursor in state.cursors.items():  # read, and the cursors stored
            await trim_units(self.redis, ModelKeys(model, self.group), cursor)
        return promoted

    def forget(self) -> None:
        """Drop what is held in memory."""
        self.pending.clear()
        self.passed.clear()

    def _current(self, stored: PromoterState | None, info: GroupInfo) -> PromoterState:
        """The stored state, or a new one against the serving model (its tallies restarted
        if the serving model changed since, but where it stopped reading)."""
        if stored is not None and stored.champion == info.serving:
            return stored
        self.forget()
        cursors = stored.cursors if stored is not None else {}
        return PromoterState(info.serving, {m: c for m, c in cursors.items() if m in info.models})

    async def _read(self, state: PromoterState, info: GroupInfo) -> bool:
        """Read every model's new unit records; False if there were none."""
        read = False
        for model in info.models:
            after = state.cursors.get(model, "0")
            keys = ModelKeys(model, self.group)
            for record_id, units in await read_units(self.redis, keys, after, READ_RECORDS):
                held = self.pending.get(model, Units.empty()).then(units)
                self.pending[model] = held.tail(max(0, len(held) - MOST_PENDING_UNITS))
                state.cursors[model] = record_id
                read = True
        return read

    def _tally(self, state: PromoterState, challenger: str, margin: float) -> None:
        champion = self.pending.get(state.champion, Units.empty())
        start = min(self.passed.get(challenger, 0), len(champion))
        ours = champion.tail(start)
        theirs = self.pending.get(challenger, Units.empty())
        matched = pair(ours, theirs)
        a, b = ours.select(matched.first), theirs.select(matched.second)
        tally = state.pairs.get(challenger, Paired())
        state.pairs[challenger] = tally.add(a.losses, b.losses, a.examples, margin)
        self.passed[challenger] = start + matched.first_through
        self.pending[challenger] = theirs.tail(matched.second_through)

    def _settle(self, champion: str, challengers: list[str]) -> None:
        """Drop the champion's units every challenger has settled."""
        held = self.pending.get(champion, Units.empty())
        done = min((self.passed.get(c, 0) for c in challengers), default=len(held))
        self.pending[champion] = held.tail(done)
        self.passed = {c: self.passed.get(c, 0) - done for c in challengers}

    def _publish(self, state: PromoterState) -> None:
        for challenger, tally in state.pairs.items():
            self.metrics.challenger_gain.labels(challenger).set(tally.relative_gain)
        self.metrics.challenger_gain.labels(state.champion).set(0.0)

    async def _promote(
        self, raw: str, state: PromoterState, winner: str, policy: PromotionPolicy
    ) -> GroupInfo | None:
        tally = state.pairs[winner]
        record: dict[str, object] = {
            "examples": tally.examples,
            "units": tally.units,
            "relative_gain": tally.relative_gain,
            "champion_logloss": tally.champion_loss / tally.examples,
            "challenger_logloss": tally.challenger_loss / tally.examples,
        }
        champion = state.champion
        others = [m for m in [champion, *state.pairs] if m != winner]
        restarted = PromoterState(winner, dict(state.cursors), {m: Paired() for m in others})
        info = await self.promotions.promote(self.group, champion, winner, raw, restarted, record)
        self.forget()
        if info is None:
            return None
        self.metrics.promotions.labels(self.group).inc()
        logger.info(
            "group %r: promoted %r over %r after %d paired examples (log loss %.6f against "
            "%.6f, %.3f%% lower; margin %g, confidence %g)",
            self.group,
            winner,
            champion,
            tally.examples,
            record["challenger_logloss"],
            record["champion_logloss"],
            100 * tally.relative_gain,
            policy.margin,
            policy.confidence,
        )
        return info


def _winner(state: PromoterState, policy: PromotionPolicy) -> str | None:
    """The challenger to promote: of those the test finds better, the one with the highest
    lower bound (ties: by name)."""
    challengers = len(state.pairs)
    alpha = alpha_each(policy, challengers)
    better = [
        (tally.lower_bound(alpha, policy.planned_units), name)
        for name, tally in sorted(state.pairs.items())
        if promotes(tally, policy, challengers)
    ]
    return max(better)[1] if better else None
