"""One learner per model: the worker process follows the registry, starting a
:class:`~workers.learner_loop.Worker` for every model it should learn and stopping the learners
of models that were deleted.

Each model keeps its own lease, so several worker processes split the work and stand by for
each other per model, with the same exactly-once commits as for one. ``OCTR_WORKER_MODELS``
limits a process to some models (the others' learning is left to other processes).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from online_ctr.learning.sequential import warm_up
from online_ctr.metrics import Metrics
from online_ctr.store.failures import redis_trouble
from online_ctr.store.keys import ModelKeys
from online_ctr.store.model_config import ModelConfig
from online_ctr.store.promotion import Promotions
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.registry import GroupInfo, Registry
from online_ctr.store.replication import ReplicaAcks
from online_ctr.store.state import ModelMismatchError, ModelStore
from workers.learner_loop import Worker, WorkerConfig
from workers.promoter import Promoter

logger = logging.getLogger(__name__)


@dataclass
class Fleet:
    """The learners of one worker process, by model name."""

    redis: RedisClient
    registry: Registry
    config: WorkerConfig
    metrics: Metrics
    own: str
    #: The models to learn; empty: every model of the registry.
    only: frozenset[str] = frozenset()
    refresh_s: float = 1.0
    #: Replica acknowledgements of every learner's commits (off unless given).
    acks: ReplicaAcks | None = None
    workers: dict[str, Worker] = field(default_factory=dict)
    #: The promoters of groups with a promotion policy, by group.
    promoters: dict[str, Promoter] = field(default_factory=dict)
    _groups: dict[str, GroupInfo] = field(default_factory=dict)
    _retired: dict[str, Worker] = field(default_factory=dict)
    _names: set[str] = field(default_factory=set)
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _stopping: bool = False

    def wants(self, name: str) -> bool:
        return not self.only or name in self.only

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Stop every learner; each finishes the group in flight."""
        self._stopping = True
        for worker in self.workers.values():
            worker.stop()

    async def sync(self) -> None:
        """Start learners for new models, forget those of deleted ones."""
        registered = await self.registry.models()
        self._groups = await self.registry.groups()
        self._names = set(registered)
        configs = {n: c for n, c in registered.items() if self.wants(n)}
        for name in set(self.workers) - set(configs):
            worker = self.workers.pop(name)
            worker.stop()  # deleted: its task ends on its own
            self._retired[name] = worker
        for name, config in sorted(configs.items()):
            streams = _streams_of_group(name, config, registered)
            if name not in self.workers:
                self.workers[name] = self._worker(name, config, streams)
            else:
                self.workers[name].sweeper.follow(streams)
            group = self._groups.get(config.group or "")
            self.workers[name].stream.units = group is not None and group.promotion is not None

    async def promote(self) -> None:
        """Run a step of the promoter of every group with a promotion policy whose serving
        model this process learns now (holds its lease): one promoter per group."""
        for gone in set(self.promoters) - set(self._groups):
            self._forget_promoter(gone)
        for name, info in self._groups.items():
            worker = self.workers.get(info.serving)
            if info.promotion is None or worker is None or not worker.lease.token:
                self._forget_promoter(name)
                continue
            if name not in self.promoters:
                promotions = Promotions(self.redis)
                self.promoters[name] = Promoter(self.redis, promotions, self.metrics, name)
                self.metrics.promotions.labels(name)  # the series exists from the start, at 0
            if await self.promoters[name].step(info) is not None:
                await self.sync()  # the new serving model's learner runs the next step

    def _forget_promoter(self, group: str) -> None:
        """This process no longer runs ``group``'s promoter (the group or its policy is gone,
        or another process learns its serving model): nor does it report its series."""
        if self.promoters.pop(group, None) is not None:
            self.metrics.forget_group(group)

    def _worker(self, name: str, config: ModelConfig, streams: list[str]) -> Worker:
        spec = config.spec(name)
        warm_up(spec.rule, spec.params)  # compiled before leading, not on the clock
        store = ModelStore(self.redis, spec, acks=self.acks)
        logger.info("worker %s learning model %r", self.config.name, name)
        own = name == self.own
        return Worker(store, self.config, self.metrics, own, config.policy(), streams)

    async def run(self) -> None:
        """Follow the registry and run the learners until :meth:`stop`."""
        while not self._stopping:
            try:
                await self.sync()
            except Exception as error:
                if not redis_trouble(error):
                    raise
                logger.warning("registry unavailable (%s); retrying", error)
            for name, worker in self.workers.items():
                if name not in self._tasks and not self._stopping:
                    self._tasks[name] = asyncio.create_task(worker.run())
            await self._promote_or_wait()
            await self._reap()
            await asyncio.sleep(self.refresh_s)
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def _promote_or_wait(self) -> None:
        try:
            await self.promote()
        except Exception as error:
            if not redis_trouble(error):
                raise
            logger.warning("promotion skipped: redis unavailable (%s)", error)

    async def _reap(self) -> None:
        """Collect the tasks of learners that ended (model deleted) and remove what their
        last heartbeat or lease may have left of the deleted model."""
        for name, task in list(self._tasks.items()):
            if not task.done():
                continue
            del self._tasks[name]
            # Ended: deleted, or failed (then started again at the next sync).
            worker = self.workers.pop(name, None) or self._retired.pop(name)
            _log_failure(name, task.exception())
            if name not in self._names:
                try:
                    await worker.store.delete()
                except Exception as error:
                    if not redis_trouble(error):
                        raise
                    logger.warning("could not remove what is left of %r (%s)", name, error)

    def learning(self) -> set[str]:
        """The models whose learners are running now."""
        return set(self._tasks)

    async def run_until_idle(self) -> int:
        """Learn every model until its stream is empty (for tests); the commits made."""
        await self.sync()
        commits = 0
        for worker in self.workers.values():
            commits += await worker.run_until_idle()
        await self.promote()
        return commits


def _log_failure(name: str, error: BaseException | None) -> None:
    """Say why the learner of ``name`` ended, if it failed: a model deleted and created again
    with other settings is ordinary operation (the next sync starts a learner of the new one),
    worth one line; anything else a traceback."""
    if isinstance(error, ModelMismatchError):
        logger.warning(
            "model %r in Redis is no longer the one its learner started with (deleted and "
            "created again with other settings); the learner starts over with the new model",
            name,
        )
    elif error is not None:
        logger.error("learner of %r failed", name, exc_info=error)


def _streams_of_group(name: str, config: ModelConfig, models: dict[str, ModelConfig]) -> list[str]:
    """The feedback streams of every model that learns what ``name`` learns: its group's
    models (in name order), or itself alone."""
    if config.group is None:
        return [ModelKeys(name).stream]
    members = sorted(n for n, c in models.items() if c.group == config.group)
    return [ModelKeys(member, config.group).stream for member in members]
