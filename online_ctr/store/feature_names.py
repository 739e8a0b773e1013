"""A model's record of its feature names by id: the one place that turns an id (all the
state holds) back into the ``field=value`` it was hashed from.

Opt-in per model (``feature_names`` in its configuration; the own model:
``OCTR_FEATURE_NAMES``), and bounded: one hash in the model's log-side tag (so deleting the
model deletes it) of at most ``OCTR_FEATURE_NAMES_MAX`` fields, id (its 8 bytes,
little-endian) -> name. At the limit, names already recorded stay and new ones are refused,
counted in ``online_ctr_feature_names_refused_total``: the record names the features seen
first, which on a stream are the most frequent ones most of the time (docs/limits.md has the
bytes per name). With reduced ``hash_bits`` two names may share an id: the first recorded stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from online_ctr.store.keys import ModelKeys
from online_ctr.store.redis_types import RedisClient, text
from online_ctr.store.scripts import register

#: Names sent per script call: bounds how long one call keeps Redis busy (~1 ms).
NAMES_PER_CALL = 1000


def field(feature_id: int) -> bytes:
    """The hash field of a feature id (unsigned): its 8 bytes, little-endian.

    >>> field(1)
    b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00'
    """
    return feature_id.to_bytes(8, "little")


@dataclass(frozen=True)
class Recorded:
    """What one :meth:`FeatureNames.record` did: names added, names refused at the limit,
    and whether the model was gone (then nothing is recorded)."""

    recorded: int = 0
    refused: int = 0
    gone: bool = False


class FeatureNames:
    """The feature-name record of one model, at most ``most`` names."""

    def __init__(self, redis: RedisClient, keys: ModelKeys, most: int) -> None:
        self.redis = redis
        self.keys = keys
        self.most = most
        self._script: Any = register(redis, "feature_names")

    async def record(self, ids: Sequence[int], names: Sequence[bytes]) -> Recorded:
        """Record the names of ``ids`` (unsigned) not recorded yet, while there is room."""
        recorded = refused = 0
        for start in range(0, len(ids), NAMES_PER_CALL):
            chunk = names[start : start + NAMES_PER_CALL]
            lengths = np.fromiter(map(len, chunk), np.uint16, len(chunk))  # names < 64 KiB
            id_bytes = np.array(ids[start : start + NAMES_PER_CALL], "<u8").tobytes()
            args = [self.most, id_bytes, lengths.astype("<u2").tobytes(), b"".join(chunk)]
            added, over, held = await self._script(
                keys=[self.keys.feature_names, self.keys.meta], args=args
            )
            if int(held) < 0:
                return Recorded(recorded, refused, gone=True)
            recorded, refused = recorded + int(added), refused + int(over)
        return Recorded(recorded, refused)

    async def names_of(self, ids: Sequence[int]) -> list[str | None]:
        """The recorded name of each id (unsigned), None where there is none."""
        if not ids:
            return []
        found = await self.redis.hmget(self.keys.feature_names, [field(i) for i in ids])
        return [None if name is None else text(name) for name in found]

    async def held(self) -> int:
        """How many names are recorded."""
        return int(await self.redis.hlen(self.keys.feature_names))
