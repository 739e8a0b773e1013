"""Every Prometheus metric of online-ctr, declared in one place.

A :class:`Metrics` is built once per process (API or worker) on the default registry; tests
build their own on a private ``CollectorRegistry``. Model metrics carry the bounded label
``model``; nothing carries a feature or request id.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import REGISTRY

#: Latency buckets for /predict, in seconds: sub-millisecond to a second.
PREDICT_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
#: Worker batch-time buckets, in seconds.
BATCH_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: The label of a model's series: bounded by the models that exist (:meth:`Metrics.forget_model`).
MODEL = ("model",)


class Metrics:
    """The metrics of one process."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self._model_state()
        self._learning()
        self._learner()
        self._feature_lifecycle()
        self._serving()
        self._joins()
        self._bounds()
        self._http()
        self._api_keys()
        self._redis()
        self._groups()

    def _counter(self, name: str, documentation: str, labels: tuple[str, ...] = MODEL) -> Counter:
        """A counter of this process's registry (by default, per model)."""
        return Counter(name, documentation, labels, registry=self.registry)

    def _gauge(self, name: str, documentation: str, labels: tuple[str, ...] = MODEL) -> Gauge:
        """A gauge of this process's registry (by default, per model)."""
        return Gauge(name, documentation, labels, registry=self.registry)

    def _histogram(self, name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
        """A histogram of this process's registry, per model."""
        return Histogram(name, documentation, MODEL, buckets=buckets, registry=self.registry)

    def _model_state(self) -> None:
        """What the model holds: its weights, features, memory and base rate."""
        self.nonzero_weights = self._gauge(
            "online_ctr_nonzero_weights", "Weights that are nonzero now."
        )
        self.features_tracked = self._gauge("online_ctr_features_tracked", "Features with state.")
        self.state_bytes = self._gauge(
            "online_ctr_state_bytes",
            "Redis memory the model's feature state takes: its bucket hashes (MEMORY USAGE of "
            "64 of them, their bytes per feature scaled to the features tracked) and its "
            "existence filters.",
        )
        self.base_rate_logit = self._gauge(
            "online_ctr_base_rate_logit",
            "What the model's base-rate prior adds to the next prediction's logit: the "
            "log-odds of its click rate so far (0 with base_rate off).",
        )

    def _learning(self) -> None:
        """What the learner learned, and how well it predicted each example first."""
        self.learned_examples = self._counter(
            "online_ctr_learned_examples", "Examples applied to the model."
        )
        self.learned_weight = self._counter(
            "online_ctr_learned_weight",
            "Importance weight of the examples applied to the model: the examples themselves "
            "when none has a weight; with negative sampling, an estimate of the examples sent.",
        )
        self.progressive_logloss = self._counter(
            "online_ctr_progressive_logloss",
            "Sum of per-example log loss, each predicted before learning from it and times "
            "its importance weight (divide by online_ctr_learned_weight_total for the mean).",
        )
        self.predicted_clicks = self._counter(
            "online_ctr_predicted_clicks",
            "Sum of the probabilities predicted for the examples applied, each before learning "
            "from it and times its importance weight: over online_ctr_clicks_total, the "
            "model's calibration sum(p) / sum(y) (1: its predictions add up to the clicks).",
        )
        self.clicks = self._counter(
            "online_ctr_clicks",
            "Sum of the labels of the examples applied (the clicks), each times its "
            "importance weight.",
        )
        self.progressive_auc = self._gauge(
            "online_ctr_progressive_auc",
            "Exact ROC AUC of the last OCTR_AUC_WINDOW progressive predictions, as learned by "
            "this worker.",
        )

    def _learner(self) -> None:
        """The learner's pace, backlog and troubles."""
        self.learn_batch = self._histogram(
            "online_ctr_learn_batch_seconds",
            "Time for a worker to read, compute and commit one batch.",
            BATCH_BUCKETS,
        )
        self.stream_lag = self._gauge(
            "online_ctr_stream_lag_entries", "Accepted feedback entries not applied yet."
        )
        self.dead_lettered = self._counter(
            "online_ctr_dead_lettered_entries", "Feedback entries moved to the dead-letter stream."
        )
        self.commit_conflicts = self._counter(
            "online_ctr_commit_conflicts",
            "Batch commits retried because another worker committed first.",
        )
        self.log_rollbacks = self._counter(
            "online_ctr_log_rollbacks",
            "Times a learner found the model's log side gone back behind its state shards (a "
            "failover to a lagging replica): commits were lost from the log (issue 37).",
        )
        self.shard_rollbacks = self._counter(
            "online_ctr_shard_rollbacks",
            "Times a learner found state shards behind the last commit that wrote to them, with "
            "the redo log trimmed past it (a shard's failover to a lagging replica): their "
            "updates were lost (issue 37).",
        )

    def _feature_lifecycle(self) -> None:
        """Features admitted, held back, expired and evicted."""
        self.features_admitted = self._counter(
            "online_ctr_features_admitted",
            "Features given state for the first time (with an admission rule, once admitted).",
        )
        self.admission_dropped = self._counter(
            "online_ctr_admission_dropped_gradients",
            "Occurrences of features not admitted yet (admission rule poisson or bloom): each "
            "contributed 0 to its prediction and its gradient was dropped.",
        )
        self.admission_filter_fill = self._gauge(
            "online_ctr_admission_filter_fill_ratio",
            "Share of the counting Bloom filter's counters above 0 (admission bloom:N): near "
            "1, most new features find their counters taken and are admitted early (bloom:N:D "
            "halves them every D examples).",
        )
        self.features_pending_admission = self._gauge(
            "online_ctr_features_pending_admission",
            "Features waiting for admission (admission bloom:N only), estimated from the "
            "counting filter's fill less the features it admitted that it still remembers.",
        )
        self.features_expired = self._counter(
            "online_ctr_features_expired",
            "Features found gone, untouched for the model's expire_after examples: started "
            "again from zero when met again, or deleted with their state.",
        )
        self.features_evicted = self._counter(
            "online_ctr_features_evicted",
            "Features the model's feature budget (max_features) evicted, the least recently "
            "touched first and zero weights before any that carry weight; met again, an "
            "evicted feature is learned as a new one.",
        )

    def _serving(self) -> None:
        """What the API scored and accepted."""
        self.predictions = self._counter("online_ctr_predictions", "Examples scored by /predict.")
        self.predict_latency = self._histogram(
            "online_ctr_predict_latency_seconds",
            "Time to answer a /predict request.",
            PREDICT_BUCKETS,
        )
        self.sampled_out = self._counter(
            "online_ctr_sampled_out_examples",
            "Non-clicks /learn accepted and dropped before the stream at the model's (or "
            "group's) negative_rate; the ones kept carry the weight of those dropped.",
        )

    def _joins(self) -> None:
        """Labels joined to logged predictions, and the impressions waiting for them (a bound of
        docs/limits.md: OCTR_MAX_PENDING_IMPRESSIONS)."""
        self.joined_labels = self._counter(
            "online_ctr_joined_labels",
            "Labels sent by prediction id, by outcome: learned, unknown, repeated or late.",
            labels=("model", "outcome"),
        )
        self.unlabeled_impressions = self._counter(
            "online_ctr_unlabeled_impressions",
            "Predictions whose window closed without a label: learned as negatives or dropped.",
            labels=("model", "action"),
        )
        self.pending_impressions = self._gauge(
            "online_ctr_pending_impressions",
            "Logged predictions waiting for a label (the model's group's, in a group).",
        )
        self.unlogged_impressions = self._counter(
            "online_ctr_unlogged_impressions",
            "Predictions answered without logging their impression, by reason: limit "
            "(OCTR_MAX_PENDING_IMPRESSIONS) or redis_memory (Redis at its memory limit).",
            labels=("model", "reason"),
        )

    def _bounds(self) -> None:
        """The bounds of docs/limits.md: what each holds, and what each refused or dropped."""
        self.idempotency_keys = self._gauge(
            "online_ctr_idempotency_keys",
            "Idempotency-Key records held for the model's feedback (its group's, in a group).",
        )
        self.idempotency_keys_evicted = self._counter(
            "online_ctr_idempotency_keys_evicted",
            "Idempotency-Key records dropped before their window ended, at "
            "OCTR_MAX_IDEMPOTENCY_KEYS.",
        )
        self.name_table_bytes = self._gauge(
            "online_ctr_name_table_bytes",
            "Bytes held by the API's feature-name tables, all models together.",
            labels=(),
        )
        self.predict_copy_features = self._gauge(
            "online_ctr_predict_copy_features",
            "Features in the API's copies of hot state, all models together "
            "(OCTR_PREDICT_CACHE_FEATURES).",
            labels=(),
        )
        self.name_table_resets = self._counter(
            "online_ctr_name_table_resets",
            "Name tables emptied to stay within OCTR_NAME_TABLE_BYTES, the largest first.",
            labels=(),
        )
        self.feature_names_refused = self._counter(
            "online_ctr_feature_names_refused",
            "Feature names not recorded for a model that records them: its record at "
            "OCTR_FEATURE_NAMES_MAX, or this process's buffer of names waiting full.",
        )

    def _http(self) -> None:
        """The API's connections and requests."""
        self.http_connections = self._gauge(
            "online_ctr_http_connections", "Open HTTP connections.", labels=()
        )
        self.http_refusals = self._counter(
            "online_ctr_http_refusals",
            "Connections closed or requests refused at a connection bound, by reason: "
            "header_bytes (431), header_timeout, idle_evicted (closed to make room for a new "
            "connection at OCTR_MAX_CONNECTIONS), concurrency (503), key_concurrency (429, "
            "OCTR_MAX_REQUESTS_PER_KEY).",
            labels=("reason",),
        )
        self.http_requests = self._counter(
            "online_ctr_http_requests",
            "HTTP requests answered, by route template and status class (2xx, 4xx, 5xx).",
            labels=("method", "route", "status_class"),
        )

    def _api_keys(self) -> None:
        """The API keys this process accepts, and those it refused to store."""
        self.api_keys = self._gauge(
            "online_ctr_api_keys",
            "API keys this process accepts, by where they come from: static (OCTR_API_KEYS, "
            "OCTR_API_KEYS_FILE) or stored (in Redis, at most OCTR_MAX_API_KEYS).",
            labels=("source",),
        )
        self.api_keys_refused = self._counter(
            "online_ctr_api_keys_refused",
            "API keys not stored because OCTR_MAX_API_KEYS are (POST /keys answered 409).",
            labels=(),
        )
        self.api_keys_reload_age = self._gauge(
            "online_ctr_api_keys_reload_age_seconds",
            "Seconds since this process last read the stored keys' version from Redis (it "
            "polls every OCTR_API_KEYS_POLL_S; a large value: revocations are not seen).",
            labels=(),
        )

    def _redis(self) -> None:
        """Redis's memory, and the writes it or its replicas refused."""
        self.redis_memory = self._gauge(
            "online_ctr_redis_memory_bytes",
            "Memory Redis uses (INFO memory used_memory).",
            labels=(),
        )
        self.redis_maxmemory = self._gauge(
            "online_ctr_redis_maxmemory_bytes",
            "Redis's memory limit (maxmemory; 0: none).",
            labels=(),
        )
        self.redis_memory_refusals = self._counter(
            "online_ctr_redis_memory_refusals",
            "Writes Redis refused at its memory limit (OOM), by what was refused: learn "
            "(a /learn answered 503), impressions (logging skipped), commit (a worker waits).",
            labels=("refused",),
        )
        self.replica_ack_timeouts = self._counter(
            "online_ctr_replica_ack_timeouts",
            "Writes fewer replicas than OCTR_REPLICA_ACKS acknowledged in time, by what waited: "
            "learn (a /learn answered 503), log (a commit not applied yet), shards (an apply "
            "not counted for trimming yet). The worker tries again.",
            labels=("waited",),
        )

    def _groups(self) -> None:
        """A group's promotions, promoter and challengers."""
        self.promotions = self._counter(
            "online_ctr_promotions",
            "Challengers a group's promotion policy made its serving model (GET /groups/{name} "
            "lists them; PUT /groups/{name} undoes one).",
            labels=("group",),
        )
        self.promoter_pending_units = self._gauge(
            "online_ctr_promoter_pending_units",
            "/learn calls a group's promoter holds in memory, learned by some of its models and "
            "waiting for the others (at most 1,000,000 per model; the oldest dropped past it).",
            labels=("group",),
        )
        self.challenger_gain = self._gauge(
            "online_ctr_challenger_gain_ratio",
            "How much lower a challenger's progressive log loss is than its group's serving "
            "model's, on the examples both learned since the serving model last changed "
            "(0.01: 1% lower; negative: higher).",
        )

    def forget_group(self, group: str) -> None:
        """Drop every series of ``group`` (its promoter no longer runs in this process): the
        process that runs it now reports it."""
        for metric in vars(self).values():
            if isinstance(metric, MetricWrapperBase) and "group" in metric._labelnames:
                metric.remove_by_labels({"group": group})

    def forget_model(self, model: str) -> None:
        """Drop every series of ``model`` (deleted): label values stay bounded by the models
        that exist, however many come and go."""
        for metric in vars(self).values():
            if isinstance(metric, MetricWrapperBase) and "model" in metric._labelnames:
                metric.remove_by_labels({"model": model})
