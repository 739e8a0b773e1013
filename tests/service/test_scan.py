"""The compiled reading of plain ``/learn`` bodies accepts only bodies the general path
(orjson, then pydantic) accepts, and makes exactly the batch the hasher makes of them."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import orjson
import pytest
from pydantic import TypeAdapter, ValidationError

from online_ctr.learning.budget import Budget
from online_ctr.learning.features import Batch, FeatureHasher
from online_ctr.learning.readers import read_examples
from service.api.learn_schemas import LearnBatch, LearnExample, LearnRequest
from service.api.scan import NameIds, scan

LEARN = TypeAdapter(LearnRequest)


def general(body: bytes, hasher: FeatureHasher) -> Batch | None:
    """What the general path makes of a body: None where it refuses it or it is no batch."""
    try:
        parsed = LEARN.validate_python(orjson.loads(body))
    except (orjson.JSONDecodeError, ValidationError):
        return None
    if not isinstance(parsed, LearnBatch | LearnExample):
        return None
    return hasher.batch(parsed.rows(), parsed.labels())


def scanned(body: bytes, names: NameIds) -> Batch | None:
    found = scan(body, want_label=True)
    return None if found is None else names.batch(body, found)


def assert_same(got: Batch | None, want: Batch | None) -> None:
    assert got is not None and want is not None
    for part in ("indptr", "ids", "values", "labels"):
        assert np.array_equal(getattr(got, part), getattr(want, part)), part


def criteo_body(data_dir: Path, count: int, indent: int | None = None) -> bytes:
    rows = list(read_examples(data_dir / "criteo/criteo_kaggle_train_head10k.tsv", "criteo"))
    examples = [{"features": dict(x), "label": y} for x, y in rows[:count]]
    return json.dumps({"examples": examples}, indent=indent).encode()


@pytest.mark.parametrize("hash_bits", [None, 10])
@pytest.mark.parametrize("indent", [None, 2])
def test_criteo_bodies_make_the_hashers_batch(
    data_dir: Path, hash_bits: int | None, indent: int | None
) -> None:
    body = criteo_body(data_dir, 1000, indent)
    names = NameIds(FeatureHasher(hash_bits))
    want = general(body, FeatureHasher(hash_bits))
    assert want is not None
    assert_same(scanned(body, names), want)
    assert_same(scanned(body, names), want)  # the second time from the table alone


def test_names_table_grows_and_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(NameIds, "LIMIT", 300)
    names, hasher = NameIds(FeatureHasher()), FeatureHasher()
    for start in range(0, 2000, 100):  # new names in every body, past the bound
        examples = [
            {"features": {"f": f"v{i}", "g": f"w{i % 7}"}, "label": i % 2}
            for i in range(start, start + 100)
        ]
        body = json.dumps({"examples": examples}).encode()
        assert_same(scanned(body, names), general(body, hasher))
        assert names.count <= 300


def test_names_table_keeps_every_name_as_it_grows(data_dir: Path) -> None:
    names = NameIds(FeatureHasher(12))  # reduced ids: many names share one
    bodies = [criteo_body(data_dir, 1000)] + [
        json.dumps(
            {"examples": [{"features": {"f": f"v{i}"}, "label": 0} for i in range(n)]}
        ).encode()
        for n in (1, 5000, 300)
    ]
    for body in bodies:
        scanned(body, names)
    count = names.count
    assert count > 10_000 and len(names.slots) >= 2 * count  # grown from 2,048 entries
    for body in bodies:  # every name is found in the table now: none is added again
        assert_same(scanned(body, names), general(body, FeatureHasher(12)))
    assert names.count == count


def test_names_on_both_sides_of_the_inline_bytes_are_told_apart() -> None:
    # A slot holds a name's first 16 bytes; longer names are compared in the arena too.
    # Names that share their first 15, 16 or 17 bytes, or differ only in length, or only
    # in one byte anywhere, must each get their own id.
    base = "fieldname=" + "v" * 30
    names_used = {base[:n] for n in range(3, len(base) + 1) if "=" in base[: n - 1]}
    names_used |= {base[:k] + "w" + base[k + 1 :] for k in range(len(base)) if base[k] != "="}
    # Thousands that share their first 16 bytes and their length: the table's probes run
    # into one another's slots.
    names_used |= {f"fieldname=vvvvvv{k:024d}" for k in range(3000)}
    features = [dict([name.split("=", 1)]) for name in sorted(names_used)]
    body = json.dumps({"examples": [{"features": f, "label": 0} for f in features]}).encode()
    names, hasher = NameIds(FeatureHasher()), FeatureHasher()
    want = general(body, hasher)
    assert_same(scanned(body, names), want)
    assert_same(scanned(body, names), want)  # from the table
    assert want is not None and len(set(want.ids.tolist())) == len(features) + 1  # and the bias


def test_every_name_is_found_again_whatever_its_field_and_value_lengths() -> None:
    # The slot's 16 inline bytes are the field, '=' and the value's start: fields and values
    # of every length around that boundary must be found in the table the second time.
    features = [{"f" * field: "v" * value} for field in range(1, 20) for value in range(0, 20)]
    body = json.dumps({"examples": [{"features": f, "label": 0} for f in features]}).encode()
    names, hasher = NameIds(FeatureHasher()), FeatureHasher()
    want = general(body, hasher)
    assert_same(scanned(body, names), want)
    count = names.count
    assert_same(scanned(body, names), want)
    assert names.count == count == len(features)  # none was added again


@pytest.mark.parametrize("width", [3, 511, 513, 1500])
def test_a_repeated_field_is_found_in_examples_of_any_width(width: int) -> None:
    # Up to 512 fields share one table over the body; wider examples get one of their own.
    distinct = {f"f{j}": "x" for j in range(width)}
    plain = [{"features": distinct, "label": 1}, {"features": {"g": "y"}, "label": 0}]
    body = json.dumps({"examples": plain}).encode()
    found = scan(body, want_label=True)
    assert found is not None and found.indptr.tolist() == [0, width, width + 1]
    repeat = body.replace(f'"f{width - 1}"'.encode(), b'"f0"')  # the last field is the first
    assert repeat != body and scan(repeat, want_label=True) is None
    later = body.replace(b'"g"', b'"f0"').replace(b'"f0": "x"', b'"h": "x"', 1)
    assert scan(later, want_label=True) is not None  # one per example: no repeat
    assert general(repeat, FeatureHasher()) is not None  # validation takes it instead


def one(field: str, value: str) -> bytes:
    return json.dumps({"examples": [{"features": {field: value}, "label": 1}]}).encode()


PLAIN = b'{"examples":[{"features":{"a":"x","b":""},"label":1},{"label":0,"features":{"c":"y"}}]}'


@pytest.mark.parametrize(
    "body",
    [
        b'{"examples":[{"features":{"a":1},"label":1}]}',  # a number
        b'{"examples":[{"features":{"a":["x"]},"label":1}]}',  # a list
        b'{"examples":[{"features":{"a":"x\\/y"},"label":1}]}',  # an escape
        '{"examples":[{"features":{"a":"café"},"label":1}]}'.encode(),  # not ASCII
        b'{"examples":[{"features":{"a":"x","a":"y"},"label":1}]}',  # a repeated field
        b'{"examples":[{"features":{"a=b":"x"},"label":1}]}',  # = in a field
        b'{"examples":[{"features":{"":"x"},"label":1}]}',  # an empty field
        b'{"examples":[{"features":{},"label":1}]}',  # no feature
        b'{"examples":[{"features":{"a":"x"},"label":1.0}]}',  # a whole float
        b'{"examples":[{"features":{"a":"x"},"label":true}]}',
        b'{"examples":[{"features":{"a":"x"},"label":10}]}',
        b'{"examples":[{"features":{"a":"x"},"label":1,"label":1}]}',
        b'{"examples":[{"features":{"a":"x"}}]}',  # no label
        b'{"examples":[{"features":{"a":"x"},"label":1,"weight":2}]}',  # another key
        b'{"examples":[]}',
        b'{"examples":[{"prediction_id":"p","label":1}]}',  # a join
        b'{"features":{"a":"x"},"label":1} 1',  # one example, then more
        b'{"features":{"a":"x"},"label":1,"split_key":"u"}',
        b'{"features":{"a":"x"}}',  # one example without its label
        b'{"examples":[{"features":{"a":"x"},"label":1}]}x',  # trailing bytes
        b'{"examples":[{"features":{"a":"x"},"label":1}],"more":1}',
        b'{"examples":[{"features":{"a":"x"},"label":1},]}',  # a trailing comma
        b'\xef\xbb\xbf{"examples":[{"features":{"a":"x"},"label":1}]}',  # a BOM
        one("n" * 257, "x"),  # a field name too long
        one("a", "v" * 1025),  # a value too long
    ],
)
def test_other_bodies_go_to_the_general_path(body: bytes) -> None:
    assert scan(body, want_label=True) is None


def test_the_longest_names_and_values_are_read() -> None:
    body = one("n" * 256, "v" * 1024)
    assert_same(scanned(body, NameIds(FeatureHasher())), general(body, FeatureHasher()))


def test_one_example_is_read_as_the_general_path_reads_it() -> None:
    body = b' {"label": 0, "features": {"a": "x", "b": "y"}}\n'
    found = scan(body, want_label=True)
    assert found is not None and found.indptr.tolist() == [0, 2]
    assert found.single and found.widest == 2
    assert_same(NameIds(FeatureHasher()).batch(body, found), general(body, FeatureHasher()))
    batch = scan(PLAIN, want_label=True)
    assert batch is not None and not batch.single
    assert batch.widest == 2 and len(batch) == 2


def test_without_labels_only_features_are_read() -> None:
    body = b'{"examples": [{"features": {"a": "x"}}, {"features": {"b": "y"}}]}'
    found = scan(body, want_label=False)
    assert found is not None and found.indptr.tolist() == [0, 1, 2]
    assert scan(PLAIN, want_label=False) is None  # a label is another key there


#: Bytes that change what JSON means, and some that do not.
MUTATIONS = [
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b'"',
    b"\\",
    b" ",
    b"\n",
    b"0",
    b"1",
    b"=",
    b"a",
    b".",
    b"e",
    b"-",
    b"\t",
    b"\x00",
    b"\xc3\xa9",
    b"true",
    b"null",
    b"2",
]


def mutants(seed: int, count: int) -> list[bytes]:
    rng = random.Random(seed)
    bases = [
        PLAIN,
        b'{"features":{"a":"x","b":"y"},"label":0}',
        json.dumps(
            {"examples": [{"features": {"f": "v", "g": "w"}, "label": 0}]}, indent=1
        ).encode(),
    ]
    out = []
    for _ in range(count):
        body = bytearray(rng.choice(bases))
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(body) + 1)
            kind = rng.random()
            if kind < 0.4:
                body[at:at] = rng.choice(MUTATIONS)
            elif kind < 0.7 and at < len(body):
                del body[at]
            elif at < len(body):
                body[at : at + 1] = rng.choice(MUTATIONS)
        out.append(bytes(body))
    return out


def test_mutated_bodies_are_read_only_where_the_general_path_agrees() -> None:
    names, hasher = NameIds(FeatureHasher()), FeatureHasher()
    read = 0
    for body in mutants(seed=7, count=20_000):
        got = scanned(body, names)
        if got is not None:
            read += 1
            want = general(body, hasher)
            assert want is not None, body
            assert_same(got, want)
    assert read > 1000  # the mutants the scan reads are not just the unchanged ones


def test_name_tables_share_one_budget_and_keep_their_answers() -> None:
    """Tables of several models under one budget: the sum stays within it, the table that
    grows past it starts again, and every batch is still exactly the hasher's."""
    budget = Budget(2 << 20)
    tables = [NameIds(FeatureHasher(), budget) for _ in range(3)]
    for round_ in range(30):
        for number, names in enumerate(tables):
            # Table 0 gets endless new names; the others the same few again and again.
            fresh = range(round_ * 2000, round_ * 2000 + 2000) if number == 0 else range(50)
            rows = [{"features": {"id": f"n{number}-{i}"}, "label": 0} for i in fresh]
            body = json.dumps({"examples": rows}).encode()
            assert_same(scanned(body, names), general(body, FeatureHasher()))
            assert budget.held() <= budget.limit
    assert budget.forgotten > 0
    assert tables[1].count == tables[2].count == 50  # the small tables were never emptied
