"""Committing learned groups, with each group's writes to the shards overlapping the learning
of the next one.

A commit finalizes on the model's log side, then applies its values to the shards
(:mod:`octr.store.commits`). The apply of group ``k`` runs while the worker fetches and learns
group ``k + 1``: Redis and the worker's Python work at the same time. That is exact because:

- group ``k + 1`` reads from Redis only features missing from the learner's cache, and every
  feature of group ``k`` is in the cache until its apply has finished (the cache is trimmed only
  when no apply is in flight), so no read can see a shard before ``k``'s values reach it;
- applies go out one at a time in commit order (each shard skips commits older than the last it
  applied, so an apply overtaking an earlier one would lose the earlier one's values);
- finalize only names as fully applied (``applied_through``) commits whose apply has finished.
"""

from __future__ import annotations

import asyncio
import contextlib

from octr.store.commits import Commit, StateChange
from octr.store.filter import ExistenceFilter
from octr.store.lease import Lease
from octr.store.state import ModelStore
from workers.cache import StateCache
from workers.learn import Learning


class Committer:
    """The learner's commits, at most one of them still being applied to the shards."""

    def __init__(self, store: ModelStore, cache: StateCache, lease: Lease) -> None:
        self.store = store
        self.cache = cache
        self.lease = lease
        self.applied_through = 0
        self._applying: asyncio.Task[int] | None = None

    async def settle(self) -> None:
        """Wait for the apply in flight; Redis errors propagate (the redo log keeps it)."""
        if self._applying is not None:
            task, self._applying = self._applying, None
            self.applied_through = await task

    async def commit(self, learning: Learning, known: ExistenceFilter | None = None) -> Commit:
        """Finalize a learned group and start applying it; the cache takes its new state and
        the existence filter ``known`` (if any) the bits of its new features."""
        await self.settle()
        commit = await self.store.log.finalize(
            learning.change, self.lease.token, self.applied_through
        )
        if commit.status == "ok":
            if known is not None:
                known.add(learning.created)
            self.cache.update(learning.rows, learning.learned.state)
            self._applying = asyncio.create_task(self._apply(commit.seq, learning.change))
        return commit

    async def trim_cache(self) -> None:
        """Bound the cache's memory; only with no apply in flight (see the module doc)."""
        if len(self.cache) > self.cache.max_features:
            await self.settle()
            self.cache.trim()

    def abandon(self, applied_through: int = 0) -> None:
        """Forget the apply in flight (after an error or a lost lease; the redo log has it)."""
        task, self._applying = self._applying, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                task.exception()  # retrieved, so asyncio does not warn about it
        self.applied_through = applied_through

    async def _apply(self, seq: int, change: StateChange) -> int:
        await self.store.shards.apply(seq, change.runs)
        return seq
