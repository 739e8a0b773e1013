"""The column-at-a-time Criteo reader makes exactly the row reader's batches, and its errors."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from online_ctr.learning import columnar, parsing
from online_ctr.learning.features import Batch, FeatureHasher, concat
from online_ctr.learning.readers import ReaderError, read_examples

pytest.importorskip("pyarrow")

FILES = ("criteo/criteo_kaggle_train_head10k.tsv", "criteo/criteo_deepctr_sample200.csv")


def row_batch(path: Path, hasher: FeatureHasher, limit: int | None = None) -> Batch:
    rows = list(read_examples(path, "criteo", limit))
    return hasher.batch([x for x, _ in rows], [y for _, y in rows])


def assert_same(got: Batch, want: Batch) -> None:
    assert np.array_equal(got.indptr, want.indptr)
    assert np.array_equal(got.ids, want.ids)
    assert np.array_equal(got.values, want.values)
    assert np.array_equal(got.labels, want.labels)


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("hash_bits", [None, 12])
def test_equals_the_row_reader(data_dir: Path, name: str, hash_bits: int | None) -> None:
    path = data_dir / name
    got = concat(list(columnar.criteo_batches(path, FeatureHasher(hash_bits))))
    assert_same(got, row_batch(path, FeatureHasher(hash_bits)))


def test_limit_and_small_blocks(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = data_dir / FILES[0]
    monkeypatch.setattr(parsing, "BLOCK_BYTES", 1 << 16)  # many blocks, a limit inside one
    monkeypatch.setattr(parsing, "FIRST_BYTES", 1 << 16)
    blocks = list(columnar.criteo_batches(path, FeatureHasher(), limit=1234))
    assert len(blocks) > 1
    assert_same(concat(blocks), row_batch(path, FeatureHasher(), 1234))


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("first", [1, 4096, 52_517, 1 << 20, 1 << 30])
def test_a_first_block_of_any_size_changes_nothing(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, first: int
) -> None:
    """The first MiB is parsed as a block of its own (up to its line's end): wherever that
    ends (inside the header, a line, the last line, or past the file), the header is skipped
    once and every row is read once, also from a file without a final newline."""
    monkeypatch.setattr(parsing, "FIRST_BYTES", first)
    monkeypatch.setattr(parsing, "BLOCK_BYTES", 1 << 16)
    want = row_batch(data_dir / name, FeatureHasher())
    assert_same(concat(list(columnar.criteo_batches(data_dir / name, FeatureHasher()))), want)
    unended = tmp_path / Path(name).name
    unended.write_bytes((data_dir / name).read_bytes().rstrip(b"\n"))
    assert_same(concat(list(columnar.criteo_batches(unended, FeatureHasher()))), want)


def test_the_first_block_is_the_first_mib(data_dir: Path) -> None:
    path = data_dir / FILES[0]
    blocks = list(columnar.criteo_batches(path, FeatureHasher()))
    head = path.read_bytes()[: parsing.FIRST_BYTES]
    assert len(blocks[0]) == head.count(b"\n") + 1  # the line the MiB ends in, whole
    assert len(blocks) == 2  # the rest of the 2.4 MB file in one block of 4 MiB


def readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("criteo-reader")]


def test_parsing_starts_when_made_and_stops_with_the_reader(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay command makes it before the kernels load, so that the first block is parsed
    meanwhile: its thread runs from then, and ends when the reader stops (here at a limit)."""
    path = data_dir / FILES[0]
    monkeypatch.setattr(parsing, "BLOCK_BYTES", 1 << 16)
    assert not readers()
    started = parsing.Parsing(path)
    assert readers()
    blocks = list(columnar.criteo_batches(path, FeatureHasher(), limit=1234, parsing=started))
    assert_same(concat(blocks), row_batch(path, FeatureHasher(), 1234))
    assert not readers()


def test_a_missing_file_fails_when_read_not_when_parsing_starts(tmp_path: Path) -> None:
    path = tmp_path / "gone.tsv"
    started = parsing.Parsing(path)
    with pytest.raises(FileNotFoundError):
        list(columnar.criteo_batches(path, FeatureHasher(), parsing=started))
    assert not readers()


def test_forgetting_field_texts_changes_nothing(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = data_dir / FILES[0]
    monkeypatch.setattr(parsing, "BLOCK_BYTES", 1 << 16)
    monkeypatch.setattr(columnar, "KNOWN_PER_COLUMN", 50)  # dropped in most blocks
    got = concat(list(columnar.criteo_batches(path, FeatureHasher())))
    assert_same(got, row_batch(path, FeatureHasher()))


def test_rechunk_keeps_every_example_in_order(data_dir: Path) -> None:
    path = data_dir / FILES[1]
    hasher = FeatureHasher()
    whole = row_batch(path, hasher)

    def pieces() -> Iterator[Batch]:  # uneven pieces, cut anywhere
        cuts = [0, 1, 2, 50, 51, 120, len(whole)]
        for start, end in pairwise(cuts):
            rows = list(read_examples(path, "criteo"))[start:end]
            yield hasher.batch([x for x, _ in rows], [y for _, y in rows])

    chunks = list(columnar.rechunk(pieces(), 64))
    assert [len(c) for c in chunks] == [64, 64, 64, len(whole) - 192]
    assert_same(concat(chunks), whole)


def test_pieces_cut_blocks_without_copying_their_examples(data_dir: Path) -> None:
    path = data_dir / FILES[1]
    hasher = FeatureHasher()
    whole = row_batch(path, hasher)
    rows = list(read_examples(path, "criteo"))
    blocks = [
        hasher.batch([x for x, _ in part], [y for _, y in part])
        for part in (rows[:130], rows[130:])
    ]
    cut = list(columnar.pieces(iter(blocks), 64))
    assert [len(c) for c in cut] == [64, 64, 2, 64, len(whole) - 194]
    assert_same(concat(cut), whole)
    assert all(np.shares_memory(c.ids, blocks[0 if i < 3 else 1].ids) for i, c in enumerate(cut))


GOOD = "1\t5" + "\t" * 25 + "ab" + "\t" * 13


@pytest.mark.parametrize(
    "text",
    [
        GOOD + "\n" + "0\t1\t2\n",  # too few columns
        GOOD + "\n" + GOOD.replace("1", "2", 1) + "\n",  # label 2
        GOOD + "\n" + GOOD.replace("\t5", "\t5.5", 1) + "\n",  # a fractional count
        GOOD + "\n\n" + GOOD + "\n",  # an empty line
        "label,I1\n1,2\n",  # a header that is not Criteo's
    ],
)
def test_errors_are_the_row_readers(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(text)
    with pytest.raises(ReaderError) as want:
        list(read_examples(path, "criteo"))
    with pytest.raises(ReaderError) as got:
        list(columnar.criteo_batches(path, FeatureHasher()))
    assert str(got.value) == str(want.value)


def test_invalid_utf8_is_the_row_readers_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_bytes((GOOD + "\n").encode() + GOOD.encode().replace(b"ab", b"a\xff") + b"\n")
    with pytest.raises(ReaderError) as want:
        list(read_examples(path, "criteo"))
    with pytest.raises(ReaderError) as got:
        list(columnar.criteo_batches(path, FeatureHasher()))
    assert str(got.value) == str(want.value) and "line 2" in str(got.value)
