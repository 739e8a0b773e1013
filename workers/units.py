"""A learner's units: per stream entry it learned (a ``/learn`` call, or a joined impression),
a key naming the entry by its content, its examples and their progressive log loss, recorded
per commit while the model's group has a promotion policy (:mod:`workers.promoter`).

Every model of a group receives the same entries, under entry ids of its own stream, so the
key is a 64-bit BLAKE2b of what the entry holds: its length, its first and last
:data:`EDGE_BYTES` bytes of encoded examples (all of an entry of a few examples) and, for a
joined impression, its id. Two entries alike at both ends and in length share a key and are
then not paired at all (:func:`online_ctr.learning.pairing.pair` drops a key seen twice): a
cost in pairs, never a wrong pair. Hashing the whole of a 1,000-example entry cost 0.46 us an
example, two thirds of decoding it; the ends cost a few microseconds an entry.
"""

from __future__ import annotations

import hashlib

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.pairing import Units
from online_ctr.store.codec import header_examples

#: Bytes of an entry's encoded examples hashed at each end.
EDGE_BYTES = 2048


def entry_key(fields: dict[bytes, bytes]) -> int:
    """The key of one stream entry's fields."""
    examples = fields.get(b"b", b"")
    digest = hashlib.blake2b(len(examples).to_bytes(8, "little"), digest_size=8)
    if len(examples) <= 2 * EDGE_BYTES:
        digest.update(examples)
    else:
        digest.update(examples[:EDGE_BYTES])
        digest.update(examples[-EDGE_BYTES:])
    digest.update(b"\0" + fields.get(b"i", b""))
    return int.from_bytes(digest.digest(), "little")


def entry_units(entries: list[dict[bytes, bytes]]) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
    """The keys and example counts of decoded entries, in stream order."""
    keys = np.fromiter((entry_key(fields) for fields in entries), np.uint64, len(entries))
    counts = [header_examples(fields.get(b"b", b"")) for fields in entries]
    return keys, np.asarray(counts, np.int64)


def learned_units(
    keys: NDArray[np.uint64], examples: NDArray[np.int64], losses: NDArray[np.float64]
) -> Units:
    """The units of a learned group: ``losses`` per example, summed per entry."""
    held = examples > 0
    starts = np.concatenate(([0], np.cumsum(examples)[:-1]))[held]
    sums = np.add.reduceat(losses, starts) if len(starts) else np.zeros(0)
    return Units(keys[held], examples[held], sums.astype(np.float64))
