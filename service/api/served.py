"""A model this process serves: its store, feature hasher, limits and metric series.

The service's own model (``OCTR_MODEL``) is built once per app in the lifespan and created in
Redis (``ensure``) lazily, on the first request that finds Redis up, so the API starts and
stays up while Redis is down; the other models come from the registry
(:mod:`service.api.catalog`) and are never created here, only checked.
Concurrent ``/predict`` requests are scored together, in passes of one hashing, one Redis read
and one numpy computation (:mod:`service.api.coalesce`); each request still gets exactly the
answer it would get alone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple

from online_ctr.config.join_policy import JOINS_OFF, JoinPolicy
from online_ctr.config.settings import Settings
from online_ctr.learning.explain import Explanation
from online_ctr.learning.features import Batch, Example, FeatureHasher, concat
from online_ctr.learning.learner import scores, scoring_features
from online_ctr.learning.rules.base import uncertainty
from online_ctr.metrics import Metrics
from online_ctr.store import idempotency
from online_ctr.store.change_notices import ChangeNotices
from online_ctr.store.idempotency import KeyLimits
from online_ctr.store.impressions import Joined
from online_ctr.store.ingest import Appended, FeedbackLog, ModelDeletedError
from online_ctr.store.redis_types import RedisClient
from online_ctr.store.replication import ReplicaAcks
from online_ctr.store.state import ModelInfo, ModelSpec, ModelStore
from online_ctr.store.state_bytes import StateBytes, state_bytes
from service.api.coalesce import Coalescer
from service.api.explained import explanations
from service.api.join_side import Logged, ServedJoins
from service.api.limits import Limits
from service.api.scan import NameIds
from service.api.tables import TableBudgets

logger = logging.getLogger(__name__)

#: Most examples scored in one pass (one Lua script call): bounds how long Redis is busy.
MAX_PASS_EXAMPLES = 4096
#: Passes in flight at once: while Redis answers one, the next is hashed and sent.
PASSES_IN_FLIGHT = 4
#: Examples from which a request's pass runs alone when none is in flight, whatever other
#: requests are in progress (service.api.coalesce). Requests of 8 connections, made to wait
#: for the others (``python -m loadtests.bench --sections serving``): of 100 examples, 302,033
#: examples/s against 265,390 alone; of 1,000, 240,669 against 340,269; of 1 (32 connections),
#: 14,113 requests/s against 7,662.
ALONE_FROM_EXAMPLES = 256


class Scores(NamedTuple):
    """A request's answers, as plain floats (what JSON needs): per example the logit, the
    served probability (calibrated if ``calibrated``) and, if asked, the uncertainty; with
    joins on, the prediction ids (None for an impression not logged), and those already used
    before (index, id): a 409."""

    logits: list[float]
    probabilities: list[float]
    uncertainties: list[float] | None
    calibrated: bool
    prediction_ids: list[str | None] | None = None
    used: list[tuple[int, str]] | None = None
    #: With ``explain``: per example its logit in parts (service.api.explained).
    explanations: list[Explanation] | None = None


class ScoringRequest(NamedTuple):
    """A request's examples, whether any of their values is a list, whether it asks for
    the uncertainty, and the prediction ids the caller gave (None where it gave none)."""

    examples: Sequence[Example]
    lists: bool
    uncertainty: bool = False
    ids: Sequence[str | None] | None = None
    #: The examples hashed already (a body read by service.api.scan); ``examples`` is empty.
    hashed: Batch | None = None
    #: How many terms to explain each logit with (0: no explanation).
    explain: int = 0

    def size(self) -> int:
        """How many examples the request holds."""
        return len(self.examples) if self.hashed is None else len(self.hashed)


class ServedModel:
    """Scores examples and appends feedback for one model.

    ``own``: the service's own model, created on first use (and again after a delete), and
    then recorded in the registry by ``register``; any other model must be in Redis, or it
    is gone (404). ``policy``: how its predictions wait for their labels. ``tables``: the
    budgets its in-memory tables share with every other model's (:mod:`service.api.tables`).
    ``negative_rate``: the fraction of non-clicks its feedback keeps
    (:mod:`online_ctr.learning.sampling`).
    """

    def __init__(
        self,
        spec: ModelSpec,
        settings: Settings,
        redis: RedisClient,
        metrics: Metrics,
        *,
        own: bool = False,
        register: Callable[[], Awaitable[object]] | None = None,
        policy: JoinPolicy = JOINS_OFF,
        tables: TableBudgets | None = None,
        negative_rate: float = 1.0,
        notices: ChangeNotices | None = None,
        others: Callable[[], bool] = lambda: False,
    ) -> None:
        names, copies = (tables.names, tables.copies) if tables else (None, None)
        self.name = spec.name
        self.own = own
        self._register = register
        features = settings.predict_cache_features
        self.store = ModelStore(redis, spec, features, copies, notices=notices)
        keys = self.store.keys
        key_limits = KeyLimits.of(settings)
        acks = ReplicaAcks.of(redis, settings, metrics.replica_ack_timeouts)
        metrics.replica_ack_timeouts.labels("learn")  # the series exists from the start, at 0
        self.negative_rate = negative_rate
        self.feedback = FeedbackLog(redis, keys.feedback, [keys], key_limits, acks, negative_rate)
        self.joins = ServedJoins(
            redis,
            keys,
            [keys.stream],
            policy,
            metrics,
            key_limits,
            settings.max_pending_impressions,
            acks,
            negative_rate,
        )
        # One hasher per app: its cache makes names seen before cost one dict look-up.
        self.hasher = FeatureHasher(
            spec.hash_bits, numeric=spec.numeric, budget=names, crosses=spec.crosses
        )
        # The same ids, for bodies read by service.api.scan: one table for /predict and one
        # for /learn, so that names learned once (a stream of new features) do not crowd the
        # names predicted again and again out of the table or, by growing it past the CPU's
        # caches, slow their look-up (measured: batch /predict at 0.65x after /learn had
        # brought 10M new names through one shared table).
        self.names = NameIds(self.hasher, names)
        self.learn_names = NameIds(self.hasher, names)
        self.limits = Limits(settings.max_examples_per_request, settings.max_features_per_example)
        self.max_heartbeat_age_s = settings.ready_max_heartbeat_age_s
        self.predictions = metrics.predictions.labels(self.name)
        self.predict_latency = metrics.predict_latency.labels(self.name)
        # Records dropped at OCTR_MAX_IDEMPOTENCY_KEYS by this model's /learn (by its group's,
        # when it serves the group: see ServedGroup.learn), and those its tag holds.
        self.keys_evicted = metrics.idempotency_keys_evicted.labels(self.name)
        # Non-clicks sampled out by this model's /learn (its group's, when it serves one).
        self.sampled_out = metrics.sampled_out.labels(self.name)
        self._keys_held = metrics.idempotency_keys.labels(self.name)
        self._gauges = (
            metrics.nonzero_weights.labels(self.name),
            metrics.features_tracked.labels(self.name),
            metrics.stream_lag.labels(self.name),
            metrics.pending_impressions.labels(self.name),
            metrics.state_bytes.labels(self.name),
        )
        self._ensured = False
        self._scorer: Coalescer[ScoringRequest, Scores] = Coalescer(
            self._score, _examples, MAX_PASS_EXAMPLES, PASSES_IN_FLIGHT, others,
            ALONE_FROM_EXAMPLES,
        )  # fmt: skip

    async def ensure(self) -> None:
        """Create (if ``own``) or check the model in Redis unless done; ModelMismatchError if
        it differs there, ModelGoneError if it was deleted."""
        if not self._ensured:
            await self.store.ensure(create=self.own)
            if self._register is not None:
                await self._register()
            self._ensured = True
            logger.info("model %r ready in Redis", self.name)

    async def predict(
        self,
        rows: Sequence[Example],
        lists: bool,
        uncertainty: bool = False,
        ids: Sequence[str | None] | None = None,
        explain: int = 0,
    ) -> Scores:
        """Logits and probabilities of the examples, with the weights as of now; ``lists``
        says whether any value is a list; with ``uncertainty``, the uncertainty too; ``ids``
        the caller's prediction ids (joins on only); with ``explain`` > 0, each logit in
        parts, its ``explain`` largest listed.

        Concurrent requests are scored together (see :mod:`service.api.coalesce`).
        """
        self.joins.check(ids)
        request = ScoringRequest(rows, lists, uncertainty, ids, explain=explain)
        return await self._scorer.submit(request)

    async def predict_hashed(self, batch: Batch) -> Scores:
        """:meth:`predict` of examples hashed already, without lists, uncertainty or ids."""
        return await self._scorer.submit(ScoringRequest((), False, hashed=batch))

    async def _score(self, requests: list[ScoringRequest]) -> list[Scores]:
        """Score several requests' examples in one pass: one Redis read, one numpy pass."""
        await self.ensure()
        batch = self._hash(requests)
        features = scoring_features(batch)
        wanted = any(request.uncertainty for request in requests)
        served = await self.store.serving(features.ids, rates=wanted)
        # The base rate's offset after the weights' sum, as the learner adds it.
        s, p = scores(batch, features, served.weights, served.base_logit)
        if served.fit is not None:
            p = served.fit.apply(p)
        s_all, p_all = s.tolist(), p.tolist()
        u_all = None
        if served.rates is not None:
            rates = served.rates[features.inverse]
            u_all = uncertainty(rates, batch.rows(), batch.values, len(batch)).tolist()
        self.predictions.inc(len(s_all))  # once per pass: the counter takes a lock
        logged: list[Logged] = []
        if self.joins.policy.on:  # logged before any answer is sent
            given = [(request.size(), request.ids) for request in requests]
            logged = await self.joins.log(given, batch, p_all)
        answers, start, calibrated = [], 0, served.fit is not None
        for k, request in enumerate(requests):
            end = start + request.size()
            u = u_all[start:end] if u_all is not None and request.uncertainty else None
            ids, used = logged[k] if logged else (None, None)
            why = None
            if request.explain:  # from the weights read above: no Redis command more
                why = explanations(
                    request.examples,
                    batch,
                    start,
                    features,
                    served.weights,
                    self.hasher,
                    request.explain,
                    served.base_logit,
                )
            answers.append(
                Scores(s_all[start:end], p_all[start:end], u, calibrated, ids, used, why)
            )
            start = end
        return answers

    def _hash(self, requests: list[ScoringRequest]) -> Batch:
        """The pass's examples as one batch, each request hashed exactly as it would be alone.

        A logit is a float sum, so its last bits depend on the order of its terms, and the
        hasher sorts a whole batch's features when an id repeats in one example (list values,
        or reduced ``hash_bits``). Requests without lists, at full 64 bits, can never trigger
        that and share one hasher call; the others get a call each.
        """
        share = self.hasher.hash_bits is None
        parts: list[Batch] = []
        shared: list[Example] = []
        for request in requests:
            if share and not request.lists and request.hashed is None:
                shared.extend(request.examples)
                continue
            if shared:
                parts.append(self.hasher.batch(shared))
                shared = []
            # A body read by service.api.scan comes hashed, as a call of its own would hash it.
            hashed = request.hashed
            parts.append(self.hasher.batch(request.examples) if hashed is None else hashed)
        if shared:
            parts.append(self.hasher.batch(shared))
        return concat(parts)

    async def learn(
        self,
        rows: Sequence[Example],
        labels: Sequence[int],
        key: str | None,
        weights: Sequence[float] | None = None,
    ) -> Appended:
        """Append the labelled examples (of importance ``weights``, if given) to the feedback
        stream as one entry, its non-clicks sampled at the model's negative rate; with an
        idempotency ``key``, only if that key was not used within the window."""
        return await self.append(self.hasher.batch(rows, labels).with_weights(weights), key)

    async def append(self, batch: Batch, key: str | None) -> Appended:
        """Append a labelled batch, hashed already, as :meth:`learn` does."""
        await self.ensure()
        try:
            appended = await self.feedback.append(batch, key)
        except ModelDeletedError:
            # Deleted by another process since this one checked: the own model is created
            # again (as DELETE does), any other is gone.
            self._ensured = False
            await self.ensure()
            appended = await self.feedback.append(batch, key)
        if appended.sampled_out:
            self.sampled_out.inc(appended.sampled_out)
        if appended.evicted:
            self.keys_evicted.inc(appended.evicted)
        return appended

    async def join(self, ids: list[str], labels: list[int], key: str | None) -> Joined:
        """Label served predictions by id (joins on only); with an idempotency ``key``, at
        most once within the window."""
        await self.ensure()
        return await self.joins.join(ids, labels, key)

    async def delete(self) -> int:
        """Delete the model and every key of it; the own model is created again, empty, at
        once."""
        deleted = await self.store.delete()
        self._ensured = False
        if self.own:
            await self.ensure()
        return deleted

    async def info(self) -> ModelInfo:
        """The model's description and counters."""
        await self.ensure()
        return await self.store.info()

    async def state_bytes(self, tracked: int) -> StateBytes:
        """What the model's feature state takes in Redis, ``tracked`` features
        (:mod:`online_ctr.store.state_bytes`)."""
        await self.ensure()
        store = self.store
        return await state_bytes(store.redis, store.keys, store.spec.layout, tracked)

    async def heartbeat_age(self) -> float | None:
        """Seconds since the freshest worker heartbeat; None if there never was one."""
        await self.ensure()
        return await self.store.heartbeat_age()

    async def refresh_gauges(self) -> None:
        """Set the model gauges from Redis (called before /metrics renders)."""
        info = await self.info()
        nonzero, tracked, lag, pending, held = self._gauges
        held.set((await self.state_bytes(info.features_tracked)).total)
        nonzero.set(info.nonzero_weights)
        tracked.set(info.features_tracked)
        lag.set(info.stream_lag)
        pending.set(await self.joins.pending_count())
        self._keys_held.set(await idempotency.held(self.store.redis, self.store.keys.feedback))


def _examples(request: ScoringRequest) -> int:
    return request.size()
