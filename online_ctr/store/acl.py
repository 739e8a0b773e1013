"""The Redis ACL users of a deployment: what the API and the learning workers may run and touch.

Each process gets the commands it sends, and those its Lua scripts call (Redis checks a
script's calls against the user that runs it), and nothing else: no FLUSHALL, CONFIG, KEYS,
SCAN, DEBUG, ACL or MONITOR. The key patterns come from :mod:`online_ctr.store.keys`, which
names every key. The API may read every key of the service and write only what a request
writes: the feedback streams, idempotency records and logged impressions, a model's meta (it
creates models), its feature names, the registry of models and groups, the replication
barriers, and the API keys managed while it runs. The state shards (``octr:{m/s}:...``)
and the redo log, from which they are rebuilt, are written only by the learners. Operations
that rewrite a model's state (deleting a model, importing a snapshot; ``online-ctr models
delete``, ``online-ctr import``) need a user with more: see ``docs/operations/security.md``.

EVALSHA declares its keys as written whatever the script does, so a script the API runs
declares only keys the API may write (``serve.lua`` takes the redo log's name as an argument).

>>> api = ROLES["api"]
>>> "%R~octr:*" in api.rules() and "-@all" in api.rules() and "+flushall" not in api.rules()
True
>>> any(rule.startswith("~octr:{*/*}") for rule in api.rules())
False
>>> writable(api, ModelKeys("default").shard(3).bucket_prefix + "17")
False
>>> writable(ROLES["worker"], ModelKeys("default").shard(3).bucket_prefix + "17")
True
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from online_ctr.store.keys import (
    PREFIX,
    ApiKeyKeys,
    FeedbackKeys,
    ModelKeys,
    RegistryKeys,
    ack_barrier,
)

#: Names no model or group has, turned into ``*`` in the patterns.
_MODEL, _GROUP = "MODEL-PATTERN", "GROUP-PATTERN"
#: A shard's number, turned into ``*``.
_SHARD = 987654321


def pattern(key: str) -> str:
    """A key of :mod:`~online_ctr.store.keys` built with the placeholder names, as a glob.

    >>> pattern(ModelKeys(_MODEL, group=_GROUP).meta)
    'octr:{g:*}:model:*:meta'
    >>> pattern(ModelKeys(_MODEL).shard(_SHARD).bucket_prefix + "*")
    'octr:{*/*}:b:*'
    """
    return key.replace(_MODEL, "*").replace(_GROUP, "*").replace(str(_SHARD), "*")


def _model_keys(name: str) -> list[str]:
    """The pattern of one log-side key (:class:`ModelKeys` property ``name``), for a model of
    its own and for a model of a group."""
    found = [getattr(ModelKeys(_MODEL), name), getattr(ModelKeys(_MODEL, _GROUP), name)]
    return [pattern(key) for key in found]


def _feedback_keys() -> list[str]:
    """Idempotency records, their index, logged impressions and the pending set, of a model's
    tag and of a group's."""
    found = []
    for keys in (FeedbackKeys.of(_MODEL, None), FeedbackKeys.of(_MODEL, _GROUP)):
        found += [keys.idempotency("*"), keys.idempotency_index, keys.impression("*")]
        found.append(keys.pending)
    return [pattern(key) for key in found]


def _state_keys() -> list[str]:
    """Every key of the state shards: buckets, ``applied`` marks, existence filters."""
    shard = ModelKeys(_MODEL).shard(_SHARD)
    return [pattern(shard.bucket_prefix + "*"), pattern(shard.applied), pattern(shard.filter)]


#: The keys of the log side, by :class:`ModelKeys` property.
LOG_SIDE = (
    "meta", "lease", "stream", "redo", "expiry", "dead", "failures", "workers", "touched",
    "units", "admission", "budget", "evictable", "pins", "feature_names",
)  # fmt: skip
#: Of those, what the API writes (it creates models, appends feedback, records names).
API_LOG_SIDE = ("meta", "stream", "feature_names")
#: What the learners write (the names are the API's).
WORKER_LOG_SIDE = tuple(name for name in LOG_SIDE if name != "feature_names")

#: Commands both processes send or have their scripts call. INFO: the memory checks and the
#: cluster-mode check at start; SCRIPT LOAD: redis-py loads a script that Redis answered
#: NOSCRIPT for; EVAL (the replication barrier), WAIT and ROLE: OCTR_REPLICA_ACKS.
_COMMON = (
    "ping", "info", "time", "evalsha", "script|load", "eval", "wait", "role",
    "get", "set", "type", "del", "pexpire",
    "hget", "hmget", "hgetall", "hlen", "hexists", "hset", "hsetnx", "hdel",
    "xadd", "xrange", "xrevrange", "xlen", "zadd", "zrem", "zcard", "zrange",
)  # fmt: skip
#: The idempotency records' bound (ZCOUNT, ZREMRANGEBYRANK, UNLINK), joins (ZSCORE), MEMORY
#: USAGE for a model's state size (GET /models/{name}), the managed API keys' version (INCR);
#: HELLO (RESP3) and CLIENT TRACKING: the change notices of /predict's copy
#: (:mod:`online_ctr.store.change_notices`); HSCAN: a bucket too large to read in one call,
#: when that copy reads the model whole (:mod:`online_ctr.store.whole_copy`).
_API = (
    "exists", "unlink", "zcount", "zscore", "zremrangebyrank", "memory|usage", "incr",
    "hello", "client|tracking", "hscan",
)  # fmt: skip
#: XREAD, XDEL, XTRIM: reading and trimming the feedback streams; the rest: the commits.
_WORKER = (
    "xread", "xdel", "xtrim", "hincrby", "hincrbyfloat", "strlen", "setrange", "bitfield",
    "zrangebyscore", "zremrangebyscore",
)  # fmt: skip
#: What redis-py's Redis Cluster client sends besides: CLUSTER SLOTS (the slot map), and
#: COMMAND (its table, to find each command's keys; GETKEYS for XREAD's).
CLUSTER_COMMANDS = ("cluster|slots", "command")


@dataclass(frozen=True)
class Role:
    """What one kind of process may do: commands, keys it reads, keys it reads and writes."""

    name: str
    commands: tuple[str, ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]

    def rules(self, cluster: bool = False) -> list[str]:
        """Its ACL rules (after ``reset``: no command, key or channel until granted)."""
        commands = sorted(set(self.commands) | set(CLUSTER_COMMANDS if cluster else ()))
        return [
            "-@all",
            *(f"+{command}" for command in commands),
            *(f"%R~{key}" for key in self.reads),
            *(f"~{key}" for key in self.writes),
        ]


def _unique(*groups: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(key for group in groups for key in group))


_REGISTRY = RegistryKeys()
_REGISTRY_KEYS = [_REGISTRY.models, _REGISTRY.groups, _REGISTRY.tallies, _REGISTRY.promotions]
_BARRIERS = [pattern(ack_barrier(ModelKeys(_MODEL).meta))]
#: The API keys managed while the service runs: added and revoked through the API's admin
#: routes, their last use written by every API process.
_API_KEYS = [ApiKeyKeys.records, ApiKeyKeys.used, ApiKeyKeys.version]

ROLES = {
    "api": Role(
        "api",
        _unique(_COMMON, _API),
        reads=(f"{PREFIX}:*",),
        writes=_unique(
            *(_model_keys(name) for name in API_LOG_SIDE),
            _feedback_keys(),
            _REGISTRY_KEYS,
            _BARRIERS,
            _API_KEYS,
        ),
    ),
    "worker": Role(
        "worker",
        _unique(_COMMON, _WORKER),
        reads=(),
        writes=_unique(
            *(_model_keys(name) for name in WORKER_LOG_SIDE),
            [pattern(FeedbackKeys.of(_MODEL, _GROUP).impression("*"))],
            [pattern(FeedbackKeys.of(_MODEL, None).impression("*"))],
            [pattern(FeedbackKeys.of(_MODEL, _GROUP).pending)],
            [pattern(FeedbackKeys.of(_MODEL, None).pending)],
            _state_keys(),
            _REGISTRY_KEYS,
            _BARRIERS,
        ),
    ),
}


def _glob(key_pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else re.escape(c) for c in key_pattern))


def writable(role: Role, key: str) -> bool:
    """Whether ``role``'s rules let it write ``key``."""
    return any(_glob(p).fullmatch(key) for p in role.writes)


def password_hash(password: str) -> str:
    """The rule that sets a user's password by its SHA-256, so that the rules never hold it.

    >>> password_hash("secret")
    '#2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b'
    """
    return "#" + hashlib.sha256(password.encode()).hexdigest()


def user_rules(role: Role, password: str, cluster: bool = False) -> list[str]:
    """A user's whole rule: reset, on, its password, and ``role``'s rules."""
    return ["reset", "on", password_hash(password), "resetchannels", *role.rules(cluster)]
