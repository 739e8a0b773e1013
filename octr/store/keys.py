"""Every Redis key online-ctr uses, in one place.

All keys of a model share the hash tag ``{model}``, so a model lives in one cluster slot and
the Lua scripts may touch all of its keys.

============================  ======  =====================================================
key                           type    contents
============================  ======  =====================================================
``octr:{m}:meta``             hash    rule, params (JSON), hash_bits, buckets, fields, ``t``
                                      (examples learned), ``tracked``, ``nnz_stable``,
                                      ``logloss_sum``
``octr:{m}:s:<b>``            string  state bucket ``b`` (feature id mod bucket count): its
                                      records sorted by id, each the id (u64) then float64
                                      rule fields and the occurrence count, little endian
``octr:{m}:expiry``           zset    nonzero features whose weight reaches 0 untouched, by
                                      that step; the nonzero count is ``nnz_stable`` + its size
``octr:{m}:stream``           stream  accepted feedback not yet applied (entries are deleted
                                      when applied, so its length is the lag)
``octr:{m}:dead``             stream  dead-lettered entries with the reason
``octr:{m}:failures``         hash    entry id -> last failure reason, until it is resolved
``octr:{m}:workers``          zset    consumer name -> Redis time of its last heartbeat
``octr:{m}:idem:<key>``       string  a /learn ``Idempotency-Key``: the body's digest and
                                      the answer, expiring after the idempotency window
============================  ======  =====================================================

>>> keys = ModelKeys("default")
>>> keys.meta, keys.bucket(7)
('octr:{default}:meta', 'octr:{default}:s:7')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "octr"
#: The stream's consumer group: every worker of a model is a consumer in it.
GROUP = "learners"
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def valid_model_name(name: str) -> bool:
    """Model names are short and safe inside key names and metric labels."""
    return MODEL_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class ModelKeys:
    """The key names of one model."""

    model: str

    def __post_init__(self) -> None:
        if not valid_model_name(self.model):
            raise ValueError(f"invalid model name {self.model!r}: use 1-64 of [A-Za-z0-9_.-]")

    def _key(self, suffix: str) -> str:
        return f"{PREFIX}:{{{self.model}}}:{suffix}"

    @property
    def meta(self) -> str:
        return self._key("meta")

    @property
    def expiry(self) -> str:
        return self._key("expiry")

    @property
    def stream(self) -> str:
        return self._key("stream")

    @property
    def dead(self) -> str:
        return self._key("dead")

    @property
    def failures(self) -> str:
        return self._key("failures")

    @property
    def workers(self) -> str:
        return self._key("workers")

    def idempotency(self, key: str) -> str:
        """The record of a /learn request's ``Idempotency-Key``."""
        return self._key(f"idem:{key}")

    def bucket(self, index: int) -> str:
        """The hash holding state bucket ``index``."""
        return self._key(f"s:{index}")

    def bucket_prefix(self) -> str:
        """What every bucket key starts with (for scans in tests and tools)."""
        return self._key("s:")
