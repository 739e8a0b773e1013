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


class Metrics:
    """The metrics of one process."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        model = ("model",)
        self.nonzero_weights = Gauge(
            "online_ctr_nonzero_weights", "Weights that are nonzero now.", model, registry=registry
        )
        self.features_tracked = Gauge(
            "online_ctr_features_tracked", "Features with state.", model, registry=registry
        )
        self.learned_examples = Counter(
            "online_ctr_learned_examples",
            "Examples applied to the model.",
            model,
            registry=registry,
        )
        self.learned_weight = Counter(
            "online_ctr_learned_weight",
            "Importance weight of the examples applied to the model: the examples themselves "
            "when none has a weight; with negative sampling, an estimate of the examples sent.",
            model,
            registry=registry,
        )
        self.progressive_logloss = Counter(
            "online_ctr_progressive_logloss",
            "Sum of per-example log loss, each predicted before learning from it and times "
            "its importance weight (divide by online_ctr_learned_weight_total for the mean).",
            model,
            registry=registry,
        )
        self.predicted_clicks = Counter(
            "online_ctr_predicted_clicks",
            "Sum of the probabilities predicted for the examples applied, each before learning "
            "from it and times its importance weight: over online_ctr_clicks_total, the "
            "model's calibration sum(p) / sum(y) (1: its predictions add up to the clicks).",
            model,
            registry=registry,
        )
        self.clicks = Counter(
            "online_ctr_clicks",
            "Sum of the labels of the examples applied (the clicks), each times its "
            "importance weight.",
            model,
            registry=registry,
        )
        self.base_rate_logit = Gauge(
            "online_ctr_base_rate_logit",
            "What the model's base-rate prior adds to the next prediction's logit: the "
            "log-odds of its click rate so far (0 with base_rate off).",
            model,
            registry=registry,
        )
        self.features_admitted = Counter(
            "online_ctr_features_admitted",
            "Features given state for the first time (with an admission rule, once admitted).",
            model,
            registry=registry,
        )
        self.admission_dropped = Counter(
            "online_ctr_admission_dropped_gradients",
            "Occurrences of features not admitted yet (admission rule poisson or bloom): each "
            "contributed 0 to its prediction and its gradient was dropped.",
            model,
            registry=registry,
        )
        self.admission_filter_fill = Gauge(
            "online_ctr_admission_filter_fill_ratio",
            "Share of the counting Bloom filter's counters above 0 (admission bloom:N): near "
            "1, most new features find their counters taken and are admitted early (bloom:N:D "
            "halves them every D examples).",
            model,
            registry=registry,
        )
        self.features_pending_admission = Gauge(
            "online_ctr_features_pending_admission",
            "Features waiting for admission (admission bloom:N only), estimated from the "
            "counting filter's fill less the features it admitted that it still remembers.",
            model,
            registry=registry,
        )
        self.features_expired = Counter(
            "online_ctr_features_expired",
            "Features found gone, untouched for the model's expire_after examples: started "
            "again from zero when met again, or deleted with their state.",
            model,
            registry=registry,
        )
        self.features_evicted = Counter(
            "online_ctr_features_evicted",
            "Features the model's feature budget (max_features) evicted, the least recently "
            "touched first and zero weights before any that carry weight; met again, an "
            "evicted feature is learned as a new one.",
            model,
            registry=registry,
        )
        self.state_bytes = Gauge(
            "online_ctr_state_bytes",
            "Redis memory the model's feature state takes: its bucket hashes (MEMORY USAGE of "
            "64 of them, their bytes per feature scaled to the features tracked) and its "
            "existence filters.",
            model,
            registry=registry,
        )
        self.sampled_out = Counter(
            "online_ctr_sampled_out_examples",
            "Non-clicks /learn accepted and dropped before the stream at the model's (or "
            "group's) negative_rate; the ones kept carry the weight of those dropped.",
            model,
            registry=registry,
        )
        self.progressive_auc = Gauge(
            "online_ctr_progressive_auc",
            "Exact ROC AUC of the last OCTR_AUC_WINDOW progressive predictions, as learned by "
            "this worker.",
            model,
            registry=registry,
        )
        self.predictions = Counter(
            "online_ctr_predictions", "Examples scored by /predict.", model, registry=registry
        )
        self.predict_latency = Histogram(
            "online_ctr_predict_latency_seconds",
            "Time to answer a /predict request.",
            model,
            buckets=PREDICT_BUCKETS,
            registry=registry,
        )
        self.learn_batch = Histogram(
            "online_ctr_learn_batch_seconds",
            "Time for a worker to read, compute and commit one batch.",
            model,
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.stream_lag = Gauge(
            "online_ctr_stream_lag_entries",
            "Accepted feedback entries not applied yet.",
            model,
            registry=registry,
        )
        self.dead_lettered = Counter(
            "online_ctr_dead_lettered_entries",
            "Feedback entries moved to the dead-letter stream.",
            model,
            registry=registry,
        )
        self.commit_conflicts = Counter(
            "online_ctr_commit_conflicts",
            "Batch commits retried because another worker committed first.",
            model,
            registry=registry,
        )
        self.joined_labels = Counter(
            "online_ctr_joined_labels",
            "Labels sent by prediction id, by outcome: learned, unknown, repeated or late.",
            ("model", "outcome"),
            registry=registry,
        )
        self.unlabeled_impressions = Counter(
            "online_ctr_unlabeled_impressions",
            "Predictions whose window closed without a label: learned as negatives or dropped.",
            ("model", "action"),
            registry=registry,
        )
        # The bounds of docs/limits.md: what each holds, and what each refused or dropped.
        self.idempotency_keys = Gauge(
            "online_ctr_idempotency_keys",
            "Idempotency-Key records held for the model's feedback (its group's, in a group).",
            model,
            registry=registry,
        )
        self.idempotency_keys_evicted = Counter(
            "online_ctr_idempotency_keys_evicted",
            "Idempotency-Key records dropped before their window ended, at "
            "OCTR_MAX_IDEMPOTENCY_KEYS.",
            model,
            registry=registry,
        )
        self.pending_impressions = Gauge(
            "online_ctr_pending_impressions",
            "Logged predictions waiting for a label (the model's group's, in a group).",
            model,
            registry=registry,
        )
        self.unlogged_impressions = Counter(
            "online_ctr_unlogged_impressions",
            "Predictions answered without logging their impression, by reason: limit "
            "(OCTR_MAX_PENDING_IMPRESSIONS) or redis_memory (Redis at its memory limit).",
            ("model", "reason"),
            registry=registry,
        )
        self.name_table_bytes = Gauge(
            "online_ctr_name_table_bytes",
            "Bytes held by the API's feature-name tables, all models together.",
            registry=registry,
        )
        self.predict_copy_features = Gauge(
            "online_ctr_predict_copy_features",
            "Features in the API's copies of hot state, all models together "
            "(OCTR_PREDICT_CACHE_FEATURES).",
            registry=registry,
        )
        self.name_table_resets = Counter(
            "online_ctr_name_table_resets",
            "Name tables emptied to stay within OCTR_NAME_TABLE_BYTES, the largest first.",
            registry=registry,
        )
        self.http_connections = Gauge(
            "online_ctr_http_connections",
            "Open HTTP connections.",
            registry=registry,
        )
        self.http_refusals = Counter(
            "online_ctr_http_refusals",
            "Connections closed or requests refused at a connection bound, by reason: "
            "header_bytes (431), header_timeout, idle_evicted (closed to make room for a new "
            "connection at OCTR_MAX_CONNECTIONS), concurrency (503), key_concurrency (429, "
            "OCTR_MAX_REQUESTS_PER_KEY).",
            ("reason",),
            registry=registry,
        )
        self.api_keys = Gauge(
            "online_ctr_api_keys",
            "API keys this process accepts, by where they come from: static (OCTR_API_KEYS, "
            "OCTR_API_KEYS_FILE) or stored (in Redis, at most OCTR_MAX_API_KEYS).",
            ("source",),
            registry=registry,
        )
        self.api_keys_refused = Counter(
            "online_ctr_api_keys_refused",
            "API keys not stored because OCTR_MAX_API_KEYS are (POST /keys answered 409).",
            registry=registry,
        )
        self.api_keys_reload_age = Gauge(
            "online_ctr_api_keys_reload_age_seconds",
            "Seconds since this process last read the stored keys' version from Redis (it "
            "polls every OCTR_API_KEYS_POLL_S; a large value: revocations are not seen).",
            registry=registry,
        )
        self.redis_memory = Gauge(
            "online_ctr_redis_memory_bytes",
            "Memory Redis uses (INFO memory used_memory).",
            registry=registry,
        )
        self.redis_maxmemory = Gauge(
            "online_ctr_redis_maxmemory_bytes",
            "Redis's memory limit (maxmemory; 0: none).",
            registry=registry,
        )
        self.redis_memory_refusals = Counter(
            "online_ctr_redis_memory_refusals",
            "Writes Redis refused at its memory limit (OOM), by what was refused: learn "
            "(a /learn answered 503), impressions (logging skipped), commit (a worker waits).",
            ("refused",),
            registry=registry,
        )
        self.http_requests = Counter(
            "online_ctr_http_requests",
            "HTTP requests answered, by route template and status class (2xx, 4xx, 5xx).",
            ("method", "route", "status_class"),
            registry=registry,
        )
        self.shard_rollbacks = Counter(
            "online_ctr_shard_rollbacks",
            "Times a learner found state shards behind the last commit that wrote to them, with "
            "the redo log trimmed past it (a shard's failover to a lagging replica): their "
            "updates were lost (issue 37).",
            model,
            registry=registry,
        )
        self.replica_ack_timeouts = Counter(
            "online_ctr_replica_ack_timeouts",
            "Writes fewer replicas than OCTR_REPLICA_ACKS acknowledged in time, by what waited: "
            "learn (a /learn answered 503), log (a commit not applied yet), shards (an apply "
            "not counted for trimming yet). The worker tries again.",
            ("waited",),
            registry=registry,
        )
        self.feature_names_refused = Counter(
            "online_ctr_feature_names_refused",
            "Feature names not recorded for a model that records them: its record at "
            "OCTR_FEATURE_NAMES_MAX, or this process's buffer of names waiting full.",
            model,
            registry=registry,
        )
        self.log_rollbacks = Counter(
            "online_ctr_log_rollbacks",
            "Times a learner found the model's log side gone back behind its state shards (a "
            "failover to a lagging replica): commits were lost from the log (issue 37).",
            model,
            registry=registry,
        )

        self.promotions = Counter(
            "online_ctr_promotions",
            "Challengers a group's promotion policy made its serving model (GET /groups/{name} "
            "lists them; PUT /groups/{name} undoes one).",
            ("group",),
            registry=registry,
        )
        self.promoter_pending_units = Gauge(
            "online_ctr_promoter_pending_units",
            "/learn calls a group's promoter holds in memory, learned by some of its models and "
            "waiting for the others (at most 1,000,000 per model; the oldest dropped past it).",
            ("group",),
            registry=registry,
        )
        self.challenger_gain = Gauge(
            "online_ctr_challenger_gain_ratio",
            "How much lower a challenger's progressive log loss is than its group's serving "
            "model's, on the examples both learned since the serving model last changed "
            "(0.01: 1% lower; negative: higher).",
            model,
            registry=registry,
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
