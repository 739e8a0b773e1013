"""A learner's units (workers.units): keys that name an entry by its content, the same in every
model's stream, and losses summed per entry."""

from __future__ import annotations

import itertools

import numpy as np

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.readers import read_examples
from online_ctr.store.codec import encode_entry, encode_rows
from testkit.paths import CRITEO
from workers.units import EDGE_BYTES, entry_key, entry_units, learned_units


def criteo_batch(rows: int, skip: int = 0):  # type: ignore[no-untyped-def]
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), skip, skip + rows))
    return FeatureHasher().batch([x for x, _ in examples], [y for _, y in examples])


def test_every_entry_of_a_file_has_its_own_key() -> None:
    single = [{b"b": blob} for blob in encode_rows(criteo_batch(10_000))]
    keys, counts = entry_units(single)
    duplicated = len(single) - len(set(keys.tolist()))
    # The file repeats some rows exactly; those, and only those, share a key.
    assert duplicated == len(single) - len({f[b"b"] for f in single})
    assert counts.tolist() == [1] * len(single)
    big = [{b"b": encode_entry(criteo_batch(1_000, skip))} for skip in range(0, 10_000, 1_000)]
    assert all(len(fields[b"b"]) > 2 * EDGE_BYTES for fields in big)
    keys, counts = entry_units(big)
    assert len(set(keys.tolist())) == 10 and counts.tolist() == [1_000] * 10


def test_a_key_is_the_content_and_the_impression() -> None:
    fields = {b"b": encode_entry(criteo_batch(3))}
    assert entry_key(fields) == entry_key(dict(fields))
    assert entry_key({**fields, b"i": b"p1"}) != entry_key({**fields, b"i": b"p2"})
    assert entry_key(fields) != entry_key({b"b": fields[b"b"] + b"\0"})


def test_losses_are_summed_per_entry_in_stream_order() -> None:
    keys = np.array([7, 8, 9], np.uint64)
    examples = np.array([2, 0, 3], np.int64)  # an entry of no example is no unit
    units = learned_units(keys, examples, np.array([0.1, 0.2, 0.3, 0.4, 0.5]))
    assert units.keys.tolist() == [7, 9] and units.examples.tolist() == [2, 3]
    np.testing.assert_allclose(units.losses, [0.3, 1.2], rtol=1e-15)
