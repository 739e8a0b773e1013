"""Criteo files read a column at a time: pyarrow's CSV reader, then each column's distinct
values hashed once, instead of a dict per row and a look-up per feature.

The batches are exactly those that :func:`online_ctr.readers.read_examples` and
:meth:`online_ctr.features.FeatureHasher.batch` make from the same rows (same ids, in the same
order within each example, so every logit sums the same terms in the same order): the row
reader stays the definition, and the tests hold the two equal. A file this reader cannot take
as it is (a line with the wrong column count, a label other than 0/1, a count that is not an
integer, bytes that are not UTF-8, an empty line) is read again by the row reader, whose error
names the line, so errors are the same whichever reader ran.

Only the ``replay`` command uses this, and only where pyarrow is installed (the ``replay``
extra): a 170 MB library the service itself does not need.

>>> import tempfile
>>> with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as f:
...     _ = f.write("1\\t5" + "\\t" * 25 + "ab" + "\\t" * 13 + "\\n")
>>> [batch.indptr.tolist() for batch in criteo_batches(f.name, FeatureHasher())]
[[0, 3]]
>>> os.remove(f.name)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from importlib.util import find_spec
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.features import BIAS, Batch, FeatureHasher, concat, merge_repeats
from online_ctr.readers import CRITEO_COLUMNS, ReaderError, criteo_bucket, read_examples

#: Bytes of the file parsed at a time: bounds memory whatever the file's size.
BLOCK_BYTES = 1 << 24


def available() -> bool:
    """Whether pyarrow is installed."""
    return find_spec("pyarrow") is not None


def criteo_batches(
    path: str | os.PathLike[str], hasher: FeatureHasher, limit: int | None = None
) -> Iterator[Batch]:
    """The Criteo file's examples (at most ``limit``), one batch per block parsed."""
    rows = 0
    for block in _blocks(path, hasher):
        if limit is not None and rows + len(block) >= limit:
            yield _head(block, limit - rows)
            return
        rows += len(block)
        yield block


def rechunk(batches: Iterable[Batch], size: int) -> Iterator[Batch]:
    """The same examples in batches of exactly ``size`` (the last one smaller)."""
    pending: list[Batch] = []
    held = 0
    for batch in batches:
        pending.append(batch)
        held += len(batch)
        while held >= size:
            first, pending = _split(concat(pending), size)
            held -= size
            yield first
    if held:
        yield concat(pending)


def _blocks(path: str | os.PathLike[str], hasher: FeatureHasher) -> Iterator[Batch]:
    """The file's rows, one batch per block pyarrow parses; a file it cannot take is
    handed to the row reader, which raises the error that names the line."""
    import pyarrow as pa

    try:
        for block in _record_batches(path):
            yield _encode(block, hasher)
    except (pa.ArrowInvalid, _Unreadable):
        for _ in read_examples(path, "criteo"):
            pass  # raises ReaderError at the first line it refuses
        raise ReaderError(path, 0, "not a Criteo file this reader can take") from None


class _Unreadable(ValueError):
    """A value the row reader would refuse (it finds which line, and says what is wrong)."""


def _record_batches(path: str | os.PathLike[str]) -> Iterator[Any]:
    """The file's columns as strings, block by block, split on the separator and nothing
    else (no quoting), as the row reader splits them."""
    import pyarrow as pa
    import pyarrow.csv as csv

    with open(path, "rb") as stream:
        first = stream.readline().decode("utf-8", "replace")
    separator = "\t" if "\t" in first else ","
    header = first.split(separator, 1)[0] == "label"
    if header and tuple(first.rstrip("\r\n").split(separator)) != CRITEO_COLUMNS:
        raise _Unreadable("header")
    reader = csv.open_csv(
        path,
        read_options=csv.ReadOptions(
            column_names=list(CRITEO_COLUMNS), skip_rows=int(header), block_size=BLOCK_BYTES
        ),
        parse_options=csv.ParseOptions(
            delimiter=separator,
            quote_char=False,
            double_quote=False,
            escape_char=False,
            ignore_empty_lines=False,
        ),
        convert_options=csv.ConvertOptions(
            column_types=dict.fromkeys(CRITEO_COLUMNS, pa.string()),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    yield from reader


def _encode(block: Any, hasher: FeatureHasher) -> Batch:
    """One parsed block as a batch: the bias, then each non-empty column in file order."""
    n = block.num_rows
    ids = np.empty((n, len(CRITEO_COLUMNS)), np.int64)
    present = np.ones((n, len(CRITEO_COLUMNS)), bool)
    ids[:, 0] = hasher.field_ids(BIAS, [None])[0]  # the bias, where the label column was
    for j, name in enumerate(CRITEO_COLUMNS[1:], start=1):
        values, codes = _dictionary(block.column(j))
        empty = np.array([value == "" for value in values], bool)
        named = [_bucket(v) if name[0] == "I" else v for v in values]
        ids[:, j] = hasher.field_ids(name, named)[codes]
        present[:, j] = ~empty[codes]
    labels = _labels(block.column(0))
    counts = present.sum(axis=1)
    batch = Batch(
        indptr=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        ids=ids[present].view(np.uint64),
        values=np.ones(int(counts.sum())),
        labels=labels,
    )
    return merge_repeats(batch) if hasher.hash_bits is not None else batch


def _dictionary(column: Any) -> tuple[list[str], NDArray[np.intp]]:
    """A string column's distinct values and each row's index among them."""
    encoded = column.dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.intp)
    return encoded.dictionary.to_pylist(), codes


def _bucket(text: str) -> str | None:
    """A count's bucket; None (skipped) where the column is empty."""
    if not text:
        return None
    try:
        return criteo_bucket(text)
    except ValueError:
        raise _Unreadable(text) from None


def _labels(column: Any) -> NDArray[np.float64]:
    values, codes = _dictionary(column)
    if not set(values) <= {"0", "1"}:
        raise _Unreadable("label")
    return np.array([float(v) for v in values])[codes] if values else np.empty(0)


def _head(batch: Batch, count: int) -> Batch:
    end = int(batch.indptr[count])
    return Batch(
        batch.indptr[: count + 1], batch.ids[:end], batch.values[:end], batch.labels[:count]
    )


def _split(batch: Batch, count: int) -> tuple[Batch, list[Batch]]:
    """The first ``count`` examples, and the rest (as a list, empty if none)."""
    end = int(batch.indptr[count])
    rest = Batch(
        batch.indptr[count:] - end, batch.ids[end:], batch.values[end:], batch.labels[count:]
    )
    return _head(batch, count), [rest] if len(rest) else []
