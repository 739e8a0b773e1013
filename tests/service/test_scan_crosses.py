"""With crosses, the compiled reading of plain bodies makes exactly the batch the hasher (the
general path, and ``replay``) makes: the same cross ids after each example's own, in the same
order, whether the names are new to the table or found in it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from online_ctr.learning.crosses import parse_crosses
from online_ctr.learning.features import FeatureHasher, feature_id
from online_ctr.learning.new_names import NewNames
from service.api.scan import NameIds, scan
from tests.service.test_scan import assert_same, criteo_body, general, scanned

CROSSES = parse_crosses("C1&C2,I1&C3,C14&C17,C3&I1,C20&missing")


@pytest.mark.parametrize("hash_bits", [None, 10])
def test_criteo_bodies_make_the_hashers_crossed_batch(
    data_dir: Path, hash_bits: int | None
) -> None:
    body = criteo_body(data_dir, 1000)
    names = NameIds(FeatureHasher(hash_bits, crosses=CROSSES))
    want = general(body, FeatureHasher(hash_bits, crosses=CROSSES))
    assert want is not None
    assert_same(scanned(body, names), want)  # every name new to the table
    assert_same(scanned(body, names), want)  # every name found in it
    plain = general(body, FeatureHasher(hash_bits))
    assert plain is not None and want.occurrences() > plain.occurrences() + 3 * 900


def test_a_cross_is_named_from_the_bodys_bytes() -> None:
    hasher = FeatureHasher(crosses=parse_crosses("site&hour,os&site"))
    hasher.new_names = NewNames(100)
    body = b'{"examples": [{"label": 1, "features": {"hour": "20", "os": "ios", "site": "n.ex"}},'
    body += b' {"features": {"site": "blog"}, "label": 0}]}'
    found = scan(body, want_label=True)
    assert found is not None
    batch = NameIds(hasher).batch(body, found)
    crossed = [feature_id(name) for name in ("site=n.ex&hour=20", "os=ios&site=n.ex")]
    assert batch.indptr.tolist() == [0, 6, 8]
    assert batch.ids[4:6].tolist() == crossed
    recorded = dict(zip(*hasher.new_names.drain(), strict=True))
    assert recorded[crossed[0]] == b"site=n.ex&hour=20"
    assert recorded[crossed[1]] == b"os=ios&site=n.ex"


def test_only_whole_field_names_cross() -> None:
    """``site`` is not ``sites`` nor ``sit``: a field matches a crossed one byte for byte."""
    hasher = FeatureHasher(crosses=parse_crosses("site&hour"))
    examples = [{"sites": "a", "hour": "1"}, {"sit": "a", "hour": "1"}, {"site": "a", "hour": "1"}]
    body = json.dumps({"examples": [{"features": x, "label": 0} for x in examples]}).encode()
    found = scan(body, want_label=True)
    assert found is not None
    batch = NameIds(hasher).batch(body, found)
    assert np.diff(batch.indptr).tolist() == [3, 3, 4]
    assert_same(batch, hasher.batch(examples, [0, 0, 0]))
