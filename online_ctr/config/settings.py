"""The service's configuration: one pydantic-settings class, read once and passed down.

Every variable has the prefix ``OCTR_`` (``OCTR_RULE=rda``); the Redis URL is also read from
plain ``REDIS_URL``. Nothing else in the code reads the environment. An ``OCTR_`` variable that
is no setting (a misspelling) is refused, not ignored.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from online_ctr.config import tls
from online_ctr.config.checks import (
    HYPER_PARAMETERS,
    MAX_JOIN_WINDOW_S,
    check_encoding,
    check_power_of_two,
    rule_params,
)
from online_ctr.learning import eviction, retention
from online_ctr.learning.admission import Admission
from online_ctr.learning.base_rate import MEAN, BaseRate
from online_ctr.learning.base_rate import SETTING as BASE_RATE_SETTING
from online_ctr.learning.crosses import MOST_CROSSES, crosses_text, parse_crosses
from online_ctr.learning.rules import RULES, get_rule
from online_ctr.learning.sampling import MIN_RATE

#: URL schemes redis-py connects with.
REDIS_SCHEMES = ("redis", "rediss", "unix")
_VARIABLE_NAME = re.compile(rf"(?<![\w'])(?:{'|'.join(HYPER_PARAMETERS)})(?![\w'])")
#: ``OCTR_`` variables that are not settings: docker-compose.yml reads them (from ``.env``,
#: deploy/env.example) to choose the image, the replicas, the published port and the secrets, and
#: a shell that sources that file passes them on to whatever it runs next.
COMPOSE_VARIABLES = frozenset(
    {
        "OCTR_IMAGE",
        "OCTR_WORKER_REPLICAS",
        "OCTR_API_BIND",
        "OCTR_API_PORT",
        "OCTR_API_KEYS_SECRET",
        "OCTR_METRICS_KEY_SECRET",
        "OCTR_REDIS_PASSWORD_SECRET",
        "OCTR_REDIS_API_PASSWORD_SECRET",
        "OCTR_REDIS_WORKER_PASSWORD_SECRET",
        "OCTR_REDIS_USERS_SECRET",
    }
)


#: Redis's memory units, as redis.conf reads them: k, m and g are powers of 1000, kb, mb and
#: gb powers of 1024, case-insensitive; no unit (or b) is bytes.
MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1024,
    "m": 1000**2,
    "mb": 1024**2,
    "g": 1000**3,
    "gb": 1024**3,
}
_MEMORY_SIZE = re.compile(r"(\d+)\s*([A-Za-z]*)")
#: The smallest Redis memory limit taken (but 0, no limit): an empty Redis holds about 1 MB,
#: and a smaller figure is surely a unit left out (512 meant as 512mb).
MIN_REDIS_MAXMEMORY = 1 << 20


def memory_bytes(value: str) -> int:
    """Bytes of a memory size written as Redis writes it: a whole number with an optional unit
    of :data:`MEMORY_UNITS`; ValueError saying how to write it otherwise.

    >>> memory_bytes("512mb"), memory_bytes("4GB"), memory_bytes("2g"), memory_bytes("1048576")
    (536870912, 4294967296, 2000000000, 1048576)
    """
    found = _MEMORY_SIZE.fullmatch(value.strip())
    unit = found[2].lower() if found else ""
    if found is None or unit not in MEMORY_UNITS:
        raise ValueError(
            f"{value!r} is not a memory size; write bytes or a whole number with a Redis "
            "unit: kb, mb, gb (1024s) or k, m, g (1000s), e.g. 512mb or 4gb"
        )
    return int(found[1]) * MEMORY_UNITS[unit]


class Settings(BaseSettings):
    """Configuration of the API, the worker and the all-in-one ``serve`` command."""

    model_config = SettingsConfigDict(env_prefix="OCTR_", extra="ignore", frozen=True)

    redis_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OCTR_REDIS_URL", "REDIS_URL"),
        description="Redis to use; unset, `online-ctr serve` starts an embedded one.",
    )
    redis_cluster: bool = Field(
        False,
        description="The Redis URL is a node of a Redis Cluster; the client finds the others.",
    )
    data_dir: Path = Field(Path(".online-ctr"), description="Where the embedded Redis keeps data.")
    model: str = Field("default", description="The model the worker learns and the API serves.")
    rule: str = Field("ftrl", description=f"Learning rule: {', '.join(sorted(RULES))}.")
    alpha: float | None = Field(None, description="Learning-rate scale (ftrl, fobos, tg, ...).")
    beta: float | None = Field(None, description="Learning-rate offset (ftrl, fobos, tg, ...).")
    l1: float | None = Field(None, description="L1 strength (gravity for tg).")
    l2: float | None = Field(None, description="L2 strength (ftrl).")
    gamma: float | None = Field(None, description="RDA's step-size scale.")
    theta: float | None = Field(None, description="Truncation threshold (tg, truncation).")
    k: int | None = Field(None, description="Truncation period in steps (tg, truncation).")
    hash_bits: int | None = Field(None, ge=1, le=64, description="Hashing-trick bits; unset: 64.")
    numeric: Literal["log_bucket", "raw"] = Field(
        "log_bucket",
        description="How a numeric value enters the model: log_bucket (the category "
        "field=floor(ln(x)^2)) or raw (x times a weight).",
    )
    calibration: Literal["off", "power"] = Field(
        "off", description="power: serve gamma * p^kappa, fitted online by the learner."
    )
    state_buckets: int = Field(
        1 << 18, description="Redis hashes a model's state is spread over (a power of two)."
    )
    state_shards: int = Field(
        64, description="Hash slots a model's state is spread over (a power of two, <= buckets)."
    )
    state_encoding: Literal["float64", "compact"] = Field(
        "float64",
        description="How a feature's state is stored: float64 (exact), or compact (4 bytes, "
        "rounded as learned; ftrl and l1sgd).",
    )
    join_window_s: int = Field(
        0,
        ge=0,
        le=MAX_JOIN_WINDOW_S,
        description="Seconds a served prediction waits for its label (/learn by "
        "prediction_id); 0: predictions are not logged.",
    )
    unlabeled: Literal["negative", "drop"] = Field(
        "negative",
        description="A prediction unlabeled when its window closes: learned as a negative, "
        "or dropped.",
    )
    admission: str = Field(
        "all",
        description="Which new features get state: all, poisson:P (admitted with probability "
        "P at each occurrence), bloom:N (at the N-th occurrence) or bloom:N:D (the counts "
        "halved every D examples, so that they forget ids that do not recur); until then a "
        "feature contributes 0 and its gradient is dropped.",
    )
    expire_after: int = Field(
        0,
        ge=0,
        le=retention.MOST,
        description=retention.SETTING,
    )
    max_features: int = Field(
        0,
        ge=0,
        le=eviction.MOST,
        description=eviction.SETTING,
    )
    base_rate: str = Field(MEAN.text, description=BASE_RATE_SETTING)
    crosses: str = Field(
        "",
        description=f"Pairs of fields the model crosses (at most {MOST_CROSSES}), A&B "
        "separated by commas, such as site&hour,site&device: an example with both fields gets "
        "one more feature, named a=va&b=vb; empty: none.",
    )
    negative_rate: float = Field(
        1.0,
        ge=MIN_RATE,
        le=1.0,
        description="Fraction of non-clicks /learn keeps (every click is kept), each kept one "
        "weighted 1/rate: less work for the same expected gradient; 1 keeps all.",
    )
    max_models: int = Field(
        100, ge=1, le=10_000, description="Most models (and metric label values) a service holds."
    )
    registry_refresh_s: float = Field(
        1.0, gt=0, description="How soon another process's model or group change is seen."
    )
    worker_models: str = Field(
        "", description="Comma-separated models a worker learns; empty: every model."
    )
    batch_size: int = Field(
        65_536, ge=1, le=1_000_000, description="Most examples a worker learns per commit."
    )
    batch_wait_ms: int = Field(50, ge=0, description="How long an idle worker waits for feedback.")
    batch_linger_ms: int = Field(
        0,
        ge=0,
        le=1000,
        description="After a group short of batch_size (the stream drained), how long a "
        "worker waits for more before reading the next: fewer, larger commits for a trickle, "
        "each example learned up to this much later (0: never).",
    )
    apply_linger_ms: int = Field(
        200,
        ge=0,
        le=1000,
        description="How long a learned group's write to the state shards waits for later "
        "groups to go with it: a feature many groups touch is written once for all of them "
        "(less Redis work per example); the model's step and predictions on a single Redis "
        "do not wait, shards read directly (Redis Cluster) lag up to this much more (0: never).",
    )
    lease_ttl_ms: int = Field(
        5000, ge=100, description="A dead learner is replaced by a standby within about this."
    )
    worker_cache_features: int = Field(
        2_000_000, ge=1, description="Features whose state a worker keeps in memory, at most."
    )
    predict_cache_features: int = Field(
        1_000_000,
        ge=0,
        description="Features whose state the API keeps in memory for /predict, all models "
        "together, kept exact by the redo log and Redis's change notices (a warm /predict "
        "then asks Redis nothing; 92-154 bytes each, 92 MB at 1,000,000; 0: off; single "
        "Redis only).",
    )
    max_deliveries: int = Field(5, ge=1, description="Deliveries before dead-lettering.")
    auc_window: int = Field(
        100_000,
        ge=1,
        le=1_000_000,
        description="Progressive predictions the worker's AUC gauge covers (9 bytes each; "
        "the AUC sorts them once a second, so at most a million).",
    )
    redis_timeout_s: float = Field(1.0, gt=0, description="Socket timeout for Redis calls.")
    replica_acks: int | None = Field(
        None,
        ge=0,
        le=16,
        description="Replicas that must hold a write before /learn answers 202 and before a "
        "commit is applied or its redo entry trimmed (Redis WAIT; never more than the master "
        "has attached); unset: 1 on Redis Cluster, 0 on a single Redis (docs/persistence).",
    )
    replica_acks_timeout_ms: int | None = Field(
        None,
        ge=1,
        description="How long a write waits for its replicas; past it /learn answers 503 (the "
        "request may have been accepted: retry it with the same Idempotency-Key); unset: half "
        "of OCTR_REDIS_TIMEOUT_S.",
    )
    redis_password_file: Path | None = Field(
        None, description="A file holding the Redis password (a Compose or Kubernetes secret)."
    )
    redis_tls_ca_file: Path | None = Field(
        None,
        description="For a rediss:// URL: the CA certificates (PEM) that signed the Redis "
        "server's certificate; unset: the system's trusted CAs.",
    )
    redis_tls_cert_file: Path | None = Field(
        None,
        description="For a rediss:// URL: a client certificate (PEM) for a Redis that requires "
        "one (mutual TLS, tls-auth-clients yes), with OCTR_REDIS_TLS_KEY_FILE.",
    )
    redis_tls_key_file: Path | None = Field(
        None, description="The private key (PEM) of OCTR_REDIS_TLS_CERT_FILE."
    )
    redis_tls_check_hostname: bool = Field(
        True,
        description="For a rediss:// URL: the Redis server's certificate must be for the URL's "
        "host (always signed by a trusted CA); false skips the name check only.",
    )
    redis_wait_s: float = Field(
        30.0, gt=0, description="How long a starting process waits for Redis to answer."
    )
    retry_after_s: int = Field(1, ge=1, description="Retry-After sent with a 503.")
    max_examples_per_request: int = Field(1000, ge=1, description="Larger requests get a 422.")
    max_features_per_example: int = Field(1000, ge=1, description="List items count one each.")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Larger bodies: a 413.")
    host: str = Field("127.0.0.1", description="API bind address.")
    port: int = Field(8000, ge=0, le=65535, description="API port.")
    embedded_redis_port: int = Field(
        6380, ge=0, le=65535, description="Port of the embedded Redis on 127.0.0.1; 0: any."
    )
    workers: int = Field(
        1, ge=1, le=64, description="Learning workers `serve` starts (one learns, others stand by)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Logging level: debug, info, warning or error."
    )
    worker_metrics_host: str = Field("127.0.0.1", description="Worker /metrics bind address.")
    worker_metrics_port: int = Field(9101, ge=0, le=65535, description="Worker /metrics; 0: off.")
    auth: Literal["on", "off"] = Field("on", description="API keys required; off: local use.")
    api_keys: SecretStr | None = Field(None, description='JSON {"<key>": ["predict", ...]}.')
    api_keys_file: Path | None = Field(None, description="A file of API keys, one per line.")
    max_api_keys: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="Most API keys stored in Redis (keys add, POST /keys); one more is refused.",
    )
    api_keys_poll_s: float = Field(
        1.0,
        gt=0,
        le=1.0,
        description="How often each API process looks for added or revoked keys (a change "
        "is applied within this plus one Redis round trip).",
    )
    api_keys_last_use_s: int = Field(
        10,
        ge=1,
        le=3600,
        description="How often each API process writes when its keys were last used.",
    )
    protect_metrics: bool = Field(
        False,
        description="/metrics needs a key with the metrics (or admin) scope; unset, it is "
        "open but shows the series of models only to such a key.",
    )
    protect_docs: bool = Field(False, description="/docs and /openapi.json need a key.")
    idempotency_window_s: int = Field(
        86_400, ge=1, le=30 * 86_400, description="How long an Idempotency-Key is remembered."
    )
    max_idempotency_keys: int = Field(
        1_000_000,
        ge=1,
        description="Idempotency-Key records kept per model (or group); past it the oldest "
        "are dropped first, shortening their retry window (docs/limits.md).",
    )
    max_pending_impressions: int = Field(
        1_000_000,
        ge=1,
        description="Logged predictions waiting for a label, per model (or group); past it "
        "/predict answers but logs no impression (docs/limits.md).",
    )
    name_table_bytes: int = Field(
        256 * 1024 * 1024,
        ge=1 << 20,
        description="Memory the API's feature-name tables may hold, across all models; past "
        "it the largest table starts again empty (docs/limits.md).",
    )
    feature_names: bool = Field(
        False,
        description="Whether the own model (OCTR_MODEL) records its feature names, so that "
        "GET /models/{name}/weights can name its weights (other models: feature_names in "
        "their configuration).",
    )
    feature_names_max: int = Field(
        100_000,
        ge=1,
        le=100_000_000,
        description="Most feature names recorded per model; past it new names are refused "
        "and counted (docs/limits.md).",
    )
    max_requests_per_key: int = Field(
        64,
        ge=1,
        description="Requests one API key may have in progress at once; more get a 429 with "
        "Retry-After (docs/limits.md).",
    )
    max_header_bytes: int = Field(
        16_384, ge=1024, le=1 << 20, description="Request line and headers; larger: a 431."
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="Longest a connection may take to send a request's headers."
    )
    idle_timeout_s: float = Field(
        5.0, gt=0, description="An idle connection (no request in progress) is closed after this."
    )
    max_connections: int = Field(
        1000,
        ge=1,
        description="Open HTTP connections and requests in progress, at most; more get a 503.",
    )
    redis_maxmemory: str | None = Field(
        None,
        description="Memory limit of the embedded Redis (bytes, or 512mb, 4gb); unset: a "
        "share of the machine's memory (docs/limits.md).",
    )
    body_timeout_s: float = Field(10.0, gt=0, description="Longest wait for a request body.")
    upload_timeout_s: float = Field(
        600.0, gt=0, description="Longest a snapshot upload (PUT /models/{name}/snapshot) may take."
    )
    worker_name: str | None = Field(None, description="Worker name; default host-pid.")
    heartbeat_interval_s: float = Field(2.0, gt=0, description="How often a worker says so.")
    ready_max_heartbeat_age_s: float = Field(
        15.0, gt=0, description="/readyz fails when the newest heartbeat is older."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_variables(cls, data: Any) -> Any:
        # A misspelled variable would otherwise be ignored, and its setting left at the default
        # without a word: checked first, as it may be what makes another value invalid.
        check_variables(os.environ)
        return data

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_level(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, value: str) -> str:
        get_rule(value)
        return value

    @field_validator("admission")
    @classmethod
    def _admission(cls, value: str) -> str:
        return Admission.parse(value).text

    @field_validator("base_rate")
    @classmethod
    def _base_rate(cls, value: str) -> str:
        return BaseRate.parse(value).text

    @field_validator("crosses")
    @classmethod
    def _crosses(cls, value: str) -> str:
        return crosses_text(parse_crosses(value))

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and urlsplit(value).scheme not in REDIS_SCHEMES:
            raise ValueError(
                f"{value!r} is not a Redis URL; write it as redis://HOST:PORT/DB "
                "(e.g. redis://localhost:6379/0), rediss:// for TLS or unix:///path"
            )
        return value

    @field_validator("redis_maxmemory")
    @classmethod
    def _memory_size(cls, value: str | None) -> str | None:
        """Checked and written as bytes (``redis_maxmemory_bytes`` reads it); 0: no limit."""
        if value is None:
            return None
        size = memory_bytes(value)
        if 0 < size < MIN_REDIS_MAXMEMORY:
            raise ValueError(
                f"{value!r} is {size} bytes, less than an empty Redis holds; give a unit "
                "(e.g. 512mb), at least 1mb, or 0 for no limit"
            )
        return str(size)

    @field_validator("state_buckets", "state_shards")
    @classmethod
    def _power_of_two(cls, value: int, info: ValidationInfo) -> int:
        # At most 2048 shards: a commit's redo entry has a field per shard, and Lua passes
        # at most ~8000 arguments to one command.
        return check_power_of_two(value, 2048 if info.field_name == "state_shards" else 1 << 24)

    @model_validator(mode="after")
    def _shards_fit_buckets(self) -> Settings:
        if self.state_shards > self.state_buckets:
            raise ValueError(
                f"OCTR_STATE_SHARDS ({self.state_shards}) cannot exceed OCTR_STATE_BUCKETS "
                f"({self.state_buckets})"
            )
        return self

    @model_validator(mode="after")
    def _params_fit_rule(self) -> Settings:
        try:
            self.rule_params()
        except ValueError as error:
            # The rules name their parameters as in the paper; name the variables instead.
            named = _VARIABLE_NAME.sub(lambda m: f"OCTR_{m[0].upper()}", str(error))
            raise ValueError(named) from None
        return self

    @model_validator(mode="after")
    def _encoding_fits_rule(self) -> Settings:
        try:
            check_encoding(self.state_encoding, self.rule, ("OCTR_STATE_ENCODING", "OCTR_RULE"))
        except ValueError as error:
            message = f"{error}: unset OCTR_STATE_ENCODING or choose one of those rules"
            raise ValueError(message) from None
        names = ("OCTR_EXPIRE_AFTER", "OCTR_STATE_ENCODING")
        try:
            retention.check_encoding(self.expire_after, self.state_encoding, names)
            names = ("OCTR_MAX_FEATURES", "OCTR_STATE_ENCODING")
            retention.check_encoding(self.max_features, self.state_encoding, names)
        except ValueError as error:
            raise ValueError(f"{error}: unset one of them") from None
        if self.expire_after and self.max_features:
            raise ValueError(
                "OCTR_EXPIRE_AFTER and OCTR_MAX_FEATURES cannot both be set (a model has a span "
                "or a budget): unset one of them"
            )
        return self

    @model_validator(mode="after")
    def _password_from_file(self) -> Settings:
        """Put the password of ``OCTR_REDIS_PASSWORD_FILE`` into the URL, so that it never
        has to be in an environment variable or on a command line."""
        if self.redis_password_file is None:
            return self
        if self.redis_url is None:
            raise ValueError("OCTR_REDIS_PASSWORD_FILE needs OCTR_REDIS_URL")
        try:
            password = self.redis_password_file.read_text().strip()
        except OSError as error:
            raise ValueError(
                f"OCTR_REDIS_PASSWORD_FILE: cannot read {self.redis_password_file}: "
                f"{error.strerror}"
            ) from None
        parts = urlsplit(self.redis_url)
        host = parts.netloc.rpartition("@")[2]
        user = quote(parts.username or "", safe="")
        netloc = f"{user}:{quote(password, safe='')}@{host}"
        # Frozen settings: set once here, while they are being built.
        object.__setattr__(self, "redis_url", urlunsplit(parts._replace(netloc=netloc)))
        return self

    @model_validator(mode="after")
    def _tls_files(self) -> Settings:
        """Read the TLS files now (each missing or unreadable one named), and refuse them
        with a URL that is not ``rediss://``: TLS settings there are a URL mistyped."""
        files = self.tls_files()
        files.context()
        given = files.given() + ([] if files.check_hostname else [tls.HOSTNAME_VARIABLE])
        scheme = None if self.redis_url is None else urlsplit(self.redis_url).scheme
        if given and scheme not in (None, "rediss"):
            raise ValueError(
                f"{', '.join(given)} set, but OCTR_REDIS_URL is {scheme}://, without TLS: "
                "write it rediss:// for TLS, or unset them"
            )
        return self

    @model_validator(mode="after")
    def _linger_within_lease(self) -> Settings:
        # A learner renews its lease once a third of it has passed: one that lingered
        # longer could lose the lease while it waits, and a standby would take over.
        if 3 * self.batch_linger_ms > self.lease_ttl_ms:
            raise ValueError(
                f"OCTR_BATCH_LINGER_MS={self.batch_linger_ms} must be at most a third of "
                f"OCTR_LEASE_TTL_MS={self.lease_ttl_ms}, or a lingering learner could lose its "
                "lease: lower it or raise OCTR_LEASE_TTL_MS"
            )
        return self

    @model_validator(mode="after")
    def _cluster_has_url(self) -> Settings:
        if self.redis_cluster and self.redis_url is None:
            raise ValueError(
                "OCTR_REDIS_CLUSTER needs OCTR_REDIS_URL (the embedded Redis is no cluster)"
            )
        return self

    @model_validator(mode="after")
    def _acks_within_timeout(self) -> Settings:
        if self.replica_acks_timeout_ms is None:
            return self
        if self.replica_acks_timeout_ms >= 1000 * self.redis_timeout_s:
            raise ValueError(
                f"OCTR_REPLICA_ACKS_TIMEOUT_MS={self.replica_acks_timeout_ms} must be below "
                f"OCTR_REDIS_TIMEOUT_S={self.redis_timeout_s:g} (in ms), or every wait for "
                "replicas would end as a Redis timeout: lower it or raise OCTR_REDIS_TIMEOUT_S"
            )
        return self

    def tls_files(self) -> tls.TlsFiles:
        """The ``OCTR_REDIS_TLS_*`` settings."""
        return tls.TlsFiles(
            self.redis_tls_ca_file,
            self.redis_tls_cert_file,
            self.redis_tls_key_file,
            self.redis_tls_check_hostname,
        )

    def redis_tls_options(self) -> dict[str, Any]:
        """redis-py's TLS arguments for the Redis URL: those of the ``OCTR_REDIS_TLS_*``
        settings for a ``rediss://`` URL, none for another (its connections take none)."""
        if self.redis_url is None or urlsplit(self.redis_url).scheme != "rediss":
            return {}
        return self.tls_files().redis_options()

    def replicas_to_ack(self) -> int:
        """``OCTR_REPLICA_ACKS``, or its default: 1 on Redis Cluster, 0 on a single Redis."""
        if self.replica_acks is not None:
            return self.replica_acks
        return 1 if self.redis_cluster else 0

    def replica_ack_timeout_ms(self) -> int:
        """``OCTR_REPLICA_ACKS_TIMEOUT_MS``, or its default: half of the Redis timeout."""
        if self.replica_acks_timeout_ms is not None:
            return self.replica_acks_timeout_ms
        return max(1, round(500 * self.redis_timeout_s))

    def redis_maxmemory_bytes(self) -> int | None:
        """``OCTR_REDIS_MAXMEMORY`` in bytes (0: no limit); None when unset."""
        return None if self.redis_maxmemory is None else int(self.redis_maxmemory)

    def hyper_parameters(self) -> dict[str, Any]:
        """The hyper-parameters that were set, by name."""
        values = {name: getattr(self, name) for name in HYPER_PARAMETERS}
        return {name: value for name, value in values.items() if value is not None}

    def rule_params(self) -> Any:
        """The rule's hyper-parameter dataclass, refusing settings the rule does not use."""
        try:
            return rule_params(self.rule, self.hyper_parameters())
        except ValueError as error:
            raise ValueError(str(error).replace("leave it out", "unset them")) from None


def setting_variables() -> frozenset[str]:
    """The environment variable of every setting, and the aliases of the Redis URL's."""
    names = {f"OCTR_{field.upper()}" for field in Settings.model_fields}
    return frozenset(names | {"OCTR_REDIS_URL"})


def check_variables(environ: Mapping[str, str]) -> None:
    """Refuse an ``OCTR_`` variable that is neither a setting nor docker-compose's, naming the
    closest setting (pydantic-settings, case-insensitive, would ignore it silently)."""
    known = setting_variables()
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith("OCTR_") or upper in known or upper in COMPOSE_VARIABLES:
            continue
        # Compared without the prefix, which every name shares and would make all look close.
        suffixes = sorted(known_name.removeprefix("OCTR_") for known_name in known)
        close = difflib.get_close_matches(upper.removeprefix("OCTR_"), suffixes, n=1)
        hint = f" (did you mean OCTR_{close[0]}?)" if close else ""
        raise ValueError(f"unknown setting {name}{hint}; unset it or fix its name")


@lru_cache
def get_settings() -> Settings:
    """The settings of this process, read from the environment once."""
    return Settings()
