"""The model this process serves: its store, feature hasher, limits and metric series.

Built once per app in the lifespan. The model is created in Redis (``ensure``) lazily, on the
first request that finds Redis up, so the API starts and stays up while Redis is down.
Concurrent ``/predict`` requests are scored together, in passes of one hashing, one Redis read
and one numpy computation (:mod:`service.api.coalesce`); each request still gets exactly the
answer it would get alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import redis.asyncio as aioredis

from online_ctr.features import Batch, Example, FeatureHasher
from online_ctr.learner import logits, sigmoid, unique_features
from service.api.coalesce import Coalescer
from service.api.schemas import Limits
from service.metrics import Metrics
from service.settings import Settings
from service.store.state import ModelInfo, ModelStore, spec_from

logger = logging.getLogger(__name__)

#: Most examples scored in one pass (one Lua script call): bounds how long Redis is busy.
MAX_PASS_EXAMPLES = 4096
#: Logits and probabilities of a request's examples, as plain floats (what JSON needs).
Scores = tuple[list[float], list[float]]


class ServedModel:
    """Scores examples and appends feedback for one model."""

    def __init__(self, settings: Settings, redis: aioredis.Redis, metrics: Metrics) -> None:
        self.name = settings.model
        spec = spec_from(
            settings.model,
            settings.rule,
            settings.rule_params(),
            settings.hash_bits,
            settings.state_buckets,
        )
        self.store = ModelStore(redis, spec)
        # One hasher per app: its cache makes names seen before cost one dict look-up.
        self.hasher = FeatureHasher(settings.hash_bits)
        self.limits = Limits(settings.max_examples_per_request, settings.max_features_per_example)
        self.max_heartbeat_age_s = settings.ready_max_heartbeat_age_s
        self.predictions = metrics.predictions.labels(self.name)
        self.predict_latency = metrics.predict_latency.labels(self.name)
        self._gauges = (
            metrics.nonzero_weights.labels(self.name),
            metrics.features_tracked.labels(self.name),
            metrics.stream_lag.labels(self.name),
        )
        self._ensured = False
        self._scorer = Coalescer(self._score, len, MAX_PASS_EXAMPLES)

    async def ensure(self) -> None:
        """Create the model in Redis unless done; ModelMismatchError if it differs there."""
        if not self._ensured:
            await self.store.ensure()
            self._ensured = True
            logger.info("model %r ready in Redis", self.name)

    async def predict(self, rows: Sequence[Example]) -> Scores:
        """Logits and probabilities of the examples, with the weights as of now.

        Concurrent requests are scored together (see :mod:`service.api.coalesce`).
        """
        return await self._scorer.submit(rows)

    async def _score(self, requests: list[Sequence[Example]]) -> list[Scores]:
        """Score several requests' examples in one pass: one hashing, one Redis read."""
        await self.ensure()
        rows = requests[0] if len(requests) == 1 else [row for part in requests for row in part]
        batch = _in_id_order(self.hasher.batch(rows))
        features = unique_features(batch)
        s = logits(batch, features, await self.store.weights(features.ids))
        s_all, p_all = s.tolist(), sigmoid(s).tolist()
        self.predictions.inc(len(s_all))  # once per pass: the counter takes a lock
        scores, start = [], 0
        for part in requests:
            end = start + len(part)
            scores.append((s_all[start:end], p_all[start:end]))
            start = end
        return scores

    async def learn(self, rows: Sequence[Example], labels: Sequence[int]) -> int:
        """Append the labelled examples to the feedback stream as one entry."""
        await self.ensure()
        batch = self.hasher.batch(rows, labels)
        await self.store.append(batch)
        return len(batch)

    async def info(self) -> ModelInfo:
        """The model's description and counters."""
        await self.ensure()
        return await self.store.info()

    async def heartbeat_age(self) -> float | None:
        """Seconds since the freshest worker heartbeat; None if there never was one."""
        await self.ensure()
        return await self.store.heartbeat_age()

    async def refresh_gauges(self) -> None:
        """Set the model gauges from Redis (called before /metrics renders)."""
        info = await self.info()
        nonzero, tracked, lag = self._gauges
        nonzero.set(info.nonzero_weights)
        tracked.set(info.features_tracked)
        lag.set(info.stream_lag)


def _in_id_order(batch: Batch) -> Batch:
    """The batch with each example's features in id order.

    A logit is a float sum, so its last bits depend on the order of the terms; the hasher
    sorts a batch only when some example has a repeated id (list values). Sorting always makes
    an example's answer the same whatever shares its pass or its request.
    """
    order = np.lexsort((batch.ids, batch.rows()))
    return Batch(batch.indptr, batch.ids[order], batch.values[order], batch.labels)
