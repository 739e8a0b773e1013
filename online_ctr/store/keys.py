"""Every Redis key online-ctr uses, in one place.

A model is two kinds of keys. Its *log side* (meta, feedback stream, redo log, lease, ...)
shares the hash tag ``{m}``: one cluster slot, so one Lua script can check the learner's fence,
acknowledge feedback and record a commit atomically. Its *state* is spread over ``shards``
hash tags ``{m/0}`` ... ``{m/S-1}``, so Redis Cluster puts one model on many slots and nodes;
every script touches the keys of one tag per call (or, on a single Redis, of several).
A model of a group ``G`` has its log side under the group's tag ``{g:G}`` instead (see
:class:`FeedbackKeys`), next to the group's idempotency records and logged impressions, and
the registry of models and groups has a tag of its own (:class:`RegistryKeys`).

A feature id's low bits pick its bucket ``b = id mod buckets`` and the bucket its shard
``b mod shards``; the feature's state is one field of the bucket's hash, named by the id's
remaining high bits, so per-feature records are read with HGET and written with HSET of only
the touched fields (see :mod:`online_ctr.store.layout` for the bytes). Each shard also has an
existence filter, a bitmap with a bit set for every feature it stores
(:mod:`online_ctr.store.filter`).

================================  ======  ============================================
>>> keys = ModelKeys("default")
>>> keys.meta, keys.shard(3).applied, keys.shard(3).bucket_prefix
('octr:{default}:meta', 'octr:{default/3}:applied', 'octr:{default/3}:b:')
>>> head, tail = keys.bucket_prefix_parts
>>> head + "3" + tail == keys.shard(3).bucket_prefix
True
>>> head + "3" + keys.applied_tail == keys.shard(3).applied
True
>>> ModelKeys("challenger", group="ctr").meta
'octr:{g:ctr}:model:challenger:meta'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "octr"
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def valid_model_name(name: str) -> bool:
    """Model names are short and safe inside key names and metric labels."""
    return MODEL_NAME.fullmatch(name) is not None


def ack_barrier(key: str) -> str:
    """The key that :mod:`online_ctr.store.replication` writes before a WAIT, in the hash tag
    of ``key`` (so on its master); it expires by itself.

    >>> ack_barrier("octr:{g:ctr}:model:a:meta"), ack_barrier("octr:{a/3}:applied")
    ('octr:{g:ctr}:acks', 'octr:{a/3}:acks')
    """
    return key[: key.index("}") + 1] + ":acks"


#: The hash tag of the model registry: ``#`` is in no model or group name, so no model's keys
#: can ever be named like it.
REGISTRY_TAG = "#registry"


@dataclass(frozen=True)
class RegistryKeys:
    """The registry of models and groups: one hash tag, so one script changes it atomically."""

    models: str = f"{PREFIX}:{{{REGISTRY_TAG}}}:models"
    groups: str = f"{PREFIX}:{{{REGISTRY_TAG}}}:groups"
    #: Per group with a promotion policy, its promoter's state (:mod:`online_ctr.store.promotion`).
    tallies: str = f"{PREFIX}:{{{REGISTRY_TAG}}}:tallies"
    #: Every promotion a promoter made, newest last (a capped stream).
    promotions: str = f"{PREFIX}:{{{REGISTRY_TAG}}}:promotions"


#: The hash tag of the API keys stored while the service runs (``#``: in no model name).
API_KEYS_TAG = "#apikeys"


@dataclass(frozen=True)
class ApiKeyKeys:
    """The API keys managed while the service runs (:mod:`online_ctr.store.api_keys`): one
    hash tag, so one script adds a key, checks the limit and moves the version atomically."""

    #: Per key id (16 hex digits of its SHA-256), a JSON record: digest, scopes, label, created.
    records: str = f"{PREFIX}:{{{API_KEYS_TAG}}}:keys"
    #: Per key id, when it was last used (Unix seconds), written at a bounded rate.
    used: str = f"{PREFIX}:{{{API_KEYS_TAG}}}:used"
    #: Moves on every change: API processes poll it and reload the records when it moved.
    version: str = f"{PREFIX}:{{{API_KEYS_TAG}}}:version"


@dataclass(frozen=True)
class FeedbackKeys:
    """Where feedback for a model, or for every model of a group, arrives: one hash tag.

    A model of no group has its own name as tag; a group ``G`` has ``g:G`` (``:`` is in no
    model name, so a group's tag never equals a model's). Its idempotency records and logged
    impressions live here, and the feedback streams of every model of the group share the tag,
    so that one script appends an example to all of them atomically.

    >>> FeedbackKeys.of("default", None).impression("p1")
    'octr:{default}:imp:p1'
    >>> FeedbackKeys.of("a", "ctr").pending
    'octr:{g:ctr}:pending'
    >>> FeedbackKeys.of("a", None).idempotency_index
    'octr:{a}:idem-index'
    """

    tag: str

    @classmethod
    def of(cls, model: str, group: str | None) -> FeedbackKeys:
        """The feedback keys of ``model`` of ``group`` (None: a model of its own)."""
        return cls(model if group is None else f"g:{group}")

    def key(self, suffix: str) -> str:
        return f"{PREFIX}:{{{self.tag}}}:{suffix}"

    def idempotency(self, key: str) -> str:
        """The record of a /learn request's ``Idempotency-Key``."""
        return self.key(f"idem:{key}")

    @property
    def idempotency_index(self) -> str:
        """The tag's idempotency keys, scored by when each record was written (Redis's clock,
        in microseconds): the order in which records are dropped at
        ``OCTR_MAX_IDEMPOTENCY_KEYS``."""
        return self.key("idem-index")

    def impression(self, prediction_id: str) -> str:
        """A served prediction waiting for its label (then, for a while, its tombstone)."""
        return self.key(f"imp:{prediction_id}")

    @property
    def pending(self) -> str:
        """Impressions waiting for a label, scored by when their window closes."""
        return self.key("pending")


@dataclass(frozen=True)
class ShardKeys:
    """The keys of one state shard: one hash tag, so one cluster slot."""

    applied: str
    bucket_prefix: str
    #: The shard's existence filter (:mod:`online_ctr.store.layout`): a bitmap string.
    filter: str

    @property
    def route(self) -> str:
        """The key a script that only reads the shard declares, so that a cluster routes the
        call to it: its replication barrier (:func:`ack_barrier`), which the script never
        touches and every process may write. Not a state key: EVALSHA checks each declared
        key as written, and the API's Redis user may not write state (:mod:`~online_ctr.store.acl`).

        >>> ModelKeys("a").shard(3).route
        'octr:{a/3}:acks'
        """
        return ack_barrier(self.applied)


@dataclass(frozen=True)
class ModelKeys:
    """The key names of one model."""

    model: str
    group: str | None = None

    def __post_init__(self) -> None:
        for name in (self.model, self.group):
            if name is not None and not valid_model_name(name):
                raise ValueError(f"invalid name {name!r}: use 1-64 of [A-Za-z0-9_.-]")

    @property
    def feedback(self) -> FeedbackKeys:
        """The keys shared with the other models of its group (its own, without one)."""
        return FeedbackKeys.of(self.model, self.group)

    def _key(self, suffix: str) -> str:
        if self.group is None:
            return f"{PREFIX}:{{{self.model}}}:{suffix}"
        # In the group's tag, so that feedback reaches every model of it in one script.
        return self.feedback.key(f"model:{self.model}:{suffix}")

    @property
    def meta(self) -> str:
        return self._key("meta")

    @property
    def lease(self) -> str:
        return self._key("lease")

    @property
    def stream(self) -> str:
        return self._key("stream")

    @property
    def redo(self) -> str:
        return self._key("redo")

    @property
    def expiry(self) -> str:
        return self._key("expiry")

    @property
    def dead(self) -> str:
        return self._key("dead")

    @property
    def failures(self) -> str:
        return self._key("failures")

    @property
    def workers(self) -> str:
        return self._key("workers")

    @property
    def touched(self) -> str:
        """Per state shard (field ``s<n>``), the last commit that wrote to it: what the shard
        must have once the redo log is replayed (:mod:`workers.rollback`)."""
        return self._key("touched")

    @property
    def units(self) -> str:
        """Per commit, the progressive log loss of each ``/learn`` unit the model learned (a
        capped stream, written while its group has a promotion policy)."""
        return self._key("units")

    @property
    def admission(self) -> str:
        """The counting Bloom filter of a model admitting features at their n-th occurrence
        (:mod:`online_ctr.learning.admission`): one byte per counter, written by the commits."""
        return self._key("admission")

    @property
    def budget(self) -> str:
        """The counts of a model with a feature budget (:mod:`online_ctr.learning.eviction`):
        per class and bin, int64 little-endian, written by the commits."""
        return self._key("budget")

    @property
    def evictable(self) -> str:
        """The members of ``expiry`` of a model with a feature budget, scored by their last
        step, so that a commit that evicts them finds them (a sorted set)."""
        return self._key("evictable")

    @property
    def pins(self) -> str:
        """Snapshot exports in progress: the redo entries each still needs (a hash)."""
        return self._key("pins")

    def shard(self, index: int) -> ShardKeys:
        """The keys of state shard ``index``."""
        tag = f"{PREFIX}:{{{self.model}/{index}}}:"
        return ShardKeys(applied=tag + "applied", bucket_prefix=tag + "b:", filter=tag + "filter")

    def bucket(self, bucket: int, shards: int) -> str:
        """The key of a bucket's hash in a layout of ``shards`` shards (``buckets.lua``
        writes the same)."""
        return f"{self.shard(bucket & (shards - 1)).bucket_prefix}{bucket}"

    @property
    def bucket_prefix_parts(self) -> tuple[str, str]:
        """What comes before and after a shard's number in its bucket key prefix (the read
        script builds the prefix of any shard from them)."""
        return f"{PREFIX}:{{{self.model}/", "}:b:"

    @property
    def applied_tail(self) -> str:
        """What comes after a shard's number in its ``applied`` key (head as above)."""
        return "}:applied"

    @property
    def bucket_pattern(self) -> str:
        """A SCAN pattern matching every bucket hash of the model, in any layout."""
        return f"{PREFIX}:{{{self.model}/*}}:b:*"

    @property
    def feature_names(self) -> str:
        """The names of its features by id, for a model that records them (a hash, at most
        ``OCTR_FEATURE_NAMES_MAX`` fields: :mod:`online_ctr.store.feature_names`)."""
        return self._key("names")

    def idempotency(self, key: str) -> str:
        """The record of a /learn request's ``Idempotency-Key`` (shared within a group)."""
        return self.feedback.idempotency(key)

    def finalize_keys(self) -> list[str]:
        """The keys ``finalize.lua`` takes, in its KEYS order."""
        return [
            self.meta,
            self.stream,
            self.expiry,
            self.failures,
            self.redo,
            self.pins,
            self.touched,
            self.admission,
            self.budget,
            self.evictable,
        ]

    def log_side(self) -> list[str]:
        """Every key of the ``{m}`` tag (for deleting a model)."""
        return [
            self.meta,
            self.lease,
            self.stream,
            self.redo,
            self.expiry,
            self.dead,
            self.failures,
            self.workers,
            self.pins,
            self.touched,
            self.feature_names,
            self.units,
            self.admission,
            self.budget,
            self.evictable,
        ]
