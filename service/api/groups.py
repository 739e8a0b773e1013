"""A group of models served as one: feedback sent once is learned by every model of it, and
``/predict`` answers from its serving model, or, with a traffic split and a caller's
``split_key``, from the model the key's stable hash picks (an A/B test).

The hash is BLAKE2b of the group's name and the key, so a user keeps their model across
requests, processes and restarts, and two groups split the same users independently.

>>> pick_by_weight({"a": 9.0, "b": 1.0}, 0.05), pick_by_weight({"a": 9.0, "b": 1.0}, 0.95)
('a', 'b')
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from online_ctr.learning.features import Example
from online_ctr.store.impressions import Joined
from online_ctr.store.ingest import Appended, FeedbackLog
from online_ctr.store.registry import GroupInfo
from service.api.join_side import ServedJoins
from service.api.served import ServedModel

#: 2**64, to map a 64-bit hash to [0, 1).
_SPAN = float(1 << 64)


def unit_hash(group: str, key: str) -> float:
    """A stable number in [0, 1) for ``key`` within ``group``."""
    digest = hashlib.blake2b(f"{group}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / _SPAN


def pick_by_weight(weights: dict[str, float], u: float) -> str:
    """The model whose share of [0, 1) holds ``u``, shares in the order of the names."""
    total = sum(weights.values())
    edge = 0.0
    names = sorted(weights)
    for name in names:
        edge += weights[name] / total
        if u < edge:
            return name
    return names[-1]  # u just below 1 with rounding in the sum


class ServedGroup:
    """The models of one group, as the API serves them."""

    def __init__(
        self,
        info: GroupInfo,
        members: dict[str, ServedModel],
        feedback: FeedbackLog,
        joins: ServedJoins,
    ) -> None:
        self.info = info
        self.name = info.name
        self.members = members
        self.feedback = feedback
        self.joins = joins
        self.serving = members[info.serving]
        # Every model of a group hashes alike but for its crosses, which the registry lets
        # differ only without joins or sampling: one hasher will do unless they differ.
        self.hasher = self.serving.hasher
        self.hashers = [member.hasher for member in members.values()]  # the streams' order
        self.alike = len({hasher.crosses for hasher in self.hashers}) == 1
        self.limits = self.serving.limits

    def pick(self, split_key: str | None) -> ServedModel:
        """The model that answers a request with ``split_key`` (None: the serving one)."""
        if split_key is None or not self.info.split:
            return self.serving
        return self.members[pick_by_weight(self.info.split, unit_hash(self.name, split_key))]

    async def learn(
        self,
        rows: Sequence[Example],
        labels: Sequence[int],
        key: str | None,
        weights: Sequence[float] | None = None,
    ) -> Appended:
        """Append the labelled examples, as one entry, to the stream of every model of the
        group, in one atomic step (with ``key``, at most once per idempotency window); its
        non-clicks sampled once, at the group's negative rate (every model of it has the same),
        so that every model learns the same entry."""
        for member in self.members.values():
            await member.ensure()
        if self.alike:
            batch = self.hasher.batch(rows, labels).with_weights(weights)
            appended = await self.feedback.append(batch, key)
        else:  # each model's entry hashed with its own crosses, the same examples
            distinct = {h.crosses: h for h in self.hashers}.values()
            made = {h.crosses: h.batch(rows, labels).with_weights(weights) for h in distinct}
            appended = await self.feedback.append_each([made[h.crosses] for h in self.hashers], key)
        # Counted as the group's joins are: by its serving model.
        if appended.sampled_out:
            self.serving.sampled_out.inc(appended.sampled_out)
        if appended.evicted:
            self.serving.keys_evicted.inc(appended.evicted)
        return appended

    async def join(self, ids: list[str], labels: list[int], key: str | None) -> Joined:
        """Label predictions served by any model of the group, by id: each is appended to
        the stream of every model of the group, in one atomic step."""
        for member in self.members.values():
            await member.ensure()
        return await self.joins.join(ids, labels, key)
