"""Criteo files read a column at a time: pyarrow's CSV reader dictionary-encodes each column
as it parses, each column's distinct values are hashed once, and one compiled pass gathers the
rows' ids, instead of a dict per row and a look-up per feature.

The examples are exactly those that :func:`online_ctr.learning.readers.read_examples` and
:meth:`online_ctr.learning.features.FeatureHasher.batch` make from the same rows (same ids, in the
same
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
from contextlib import suppress
from typing import Any

import numpy as np
from numpy.typing import NDArray

from online_ctr.learning.features import BIAS, Batch, FeatureHasher, concat, merge_repeats
from online_ctr.learning.jit import compiled
from online_ctr.learning.parsing import Parsing, Unreadable
from online_ctr.learning.readers import CRITEO_COLUMNS, ReaderError, criteo_bucket, read_examples


def criteo_batches(
    path: str | os.PathLike[str],
    hasher: FeatureHasher,
    limit: int | None = None,
    parsing: Parsing | None = None,
) -> Iterator[Batch]:
    """The Criteo file's examples (at most ``limit``), one batch per block parsed; from
    ``parsing`` (of ``path``) if it was started already."""
    rows = 0
    for block in _blocks(path, hasher, parsing or Parsing(path)):
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


def pieces(batches: Iterable[Batch], size: int) -> Iterator[Batch]:
    """The same examples in batches of at most ``size``, each a view of one of ``batches``
    (only the row offsets of a split are copied): for the exact sequential learner, whose
    results do not depend on how the examples are grouped. :func:`rechunk`'s exact sizes
    copy every example once (200,000 Criteo rows: ~0.05 s of a 0.45 s replay)."""
    for batch in batches:
        while len(batch) > size:
            first, rest = _split(batch, size)
            yield first
            batch = rest[0]
        if len(batch):
            yield batch


def _blocks(
    path: str | os.PathLike[str], hasher: FeatureHasher, parsing: Parsing
) -> Iterator[Batch]:
    """The file's rows, one batch per block pyarrow parses; a file it cannot take is
    handed to the row reader, which raises the error that names the line."""
    import pyarrow as pa

    columns = ColumnIds(hasher)
    try:
        for block in parsing:
            yield _encode(block, columns)
    except (pa.ArrowInvalid, Unreadable):
        for _ in read_examples(path, "criteo"):
            pass  # raises ReaderError at the first line it refuses
        raise ReaderError(path, 0, "not a Criteo file this reader can take") from None


class ColumnIds:
    """The id of each column's field text, remembered from block to block: a block's distinct
    values are looked up in one pass that runs in C, and only the new ones are checked (UTF-8,
    as the row reader decodes each line), bucketed and hashed, all at once
    (:meth:`FeatureHasher.ids_of_bytes`). An empty field has no feature: it is marked absent,
    and :func:`_gather` drops it."""

    def __init__(self, hasher: FeatureHasher) -> None:
        self.hasher = hasher
        self.bias = hasher.field_ids(BIAS, [None])
        self._known: dict[str, dict[bytes, int]] = {}

    def ids(self, name: str, values: list[bytes]) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        """The ids of ``name``'s distinct ``values``, and which of them are present."""
        known = self._known.setdefault(name, {})
        try:  # straight into the array, without a list of them first (200,000 rows: ~10 ms)
            found = np.fromiter(map(known.__getitem__, values), np.int64, len(values))
        except KeyError:  # values this column has not had yet
            found = np.array(self._learn(name, values, known), np.int64)
        present = np.ones(len(values), bool)
        if b"" in known:  # this column has had empty fields: is one in this block?
            with suppress(ValueError):
                present[values.index(b"")] = False
        return found, present

    def _learn(self, name: str, values: list[bytes], known: dict[bytes, int]) -> list[int]:
        """Check and hash the values ``known`` lacks, all in one call, and remember them."""
        if len(known) + len(values) > KNOWN_PER_COLUMN:
            known.clear()  # a bound on memory, like the hasher's own
        new = [value for value in values if value and value not in known]
        _check_utf8(new)
        if name[0] == "I":
            names = [f"{name}={_bucket(value.decode())}".encode() for value in new]
        else:  # valid UTF-8: "C1=" then the value's own bytes are the name's UTF-8 bytes
            prefix = f"{name}=".encode()
            names = [prefix + value for value in new]
        ids = self.hasher.ids_of_bytes(names)
        known.update(zip(new, ids.tolist(), strict=True))
        if b"" in values:
            known[b""] = 0  # absent: the id is never read
        return list(map(known.__getitem__, values))


#: Field texts remembered per column before that column's memory is dropped.
KNOWN_PER_COLUMN = 1 << 18


def _encode(block: Any, columns: ColumnIds) -> Batch:
    """One parsed block as a batch: the bias, then each non-empty column in file order."""
    width = len(CRITEO_COLUMNS)  # the label's column holds the bias
    codes = np.zeros((width, block.num_rows), np.int32)
    tables, present = [columns.bias], [np.ones(1, bool)]
    for j, name in enumerate(CRITEO_COLUMNS[1:], start=1):
        values, codes[j] = _dictionary(block.column(j))
        table, where = columns.ids(name, values)
        tables.append(table)
        present.append(where)
    offsets = np.cumsum([0] + [len(table) for table in tables[:-1]])
    indptr, ids = _gather(codes, offsets, np.concatenate(tables), np.concatenate(present))
    batch = Batch(indptr, ids.view(np.uint64), np.ones(len(ids)), _labels(block.column(0)))
    return merge_repeats(batch) if columns.hasher.hash_bits is not None else batch


@compiled
def _gather(
    codes: NDArray[np.int32],
    offsets: NDArray[np.int64],
    table: NDArray[np.int64],
    present: NDArray[np.bool_],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The CSR rows of a block: row ``i`` holds, column by column, the id of its value
    (``table[offsets[j] + codes[j, i]]``) where that value is present (not an empty field).
    One pass in row order, instead of a strided scatter per column and then a mask."""
    width, rows = codes.shape
    indptr = np.empty(rows + 1, np.int64)
    ids = np.empty(width * rows, np.int64)
    indptr[0], k = 0, 0
    for i in range(rows):
        for j in range(width):
            c = offsets[j] + codes[j, i]
            if present[c]:
                ids[k] = table[c]
                k += 1
        indptr[i + 1] = k
    return indptr, ids[:k]


def _dictionary(column: Any) -> tuple[list[bytes], NDArray[np.int32]]:
    """A dictionary-encoded column's distinct values and each row's index among them."""
    return column.dictionary.to_pylist(), column.indices.to_numpy(zero_copy_only=False)


def _check_utf8(values: list[bytes]) -> None:
    """Refuse fields that are not UTF-8, as the row reader's decoding of each line does: all
    checked in one decoding, joined by an ASCII byte, which ends any character and starts
    none, so the whole is UTF-8 exactly where each field is (a first block's ~44,000 new
    Criteo values: ~10 ms less than decoding each into a text to encode again)."""
    try:
        b"\t".join(values).decode()
    except UnicodeDecodeError as error:
        raise Unreadable(str(error)) from None


def _bucket(text: str) -> str:
    """A (non-empty) count's bucket."""
    try:
        return criteo_bucket(text)
    except ValueError:
        raise Unreadable(text) from None


def _labels(column: Any) -> NDArray[np.float64]:
    values, codes = _dictionary(column)
    if not set(values) <= {b"0", b"1"}:
        raise Unreadable("label")
    return np.array([float(v) for v in values])[codes] if values else np.empty(0)


def warm_up() -> None:
    """Load the compiled gather from numba's cache (or compile it) before anything is timed."""
    one = np.zeros((1, 1), np.int32)
    _gather(one, np.zeros(1, np.int64), np.zeros(1, np.int64), np.ones(1, bool))


def _head(batch: Batch, count: int) -> Batch:
    return batch.examples(0, count)


def _split(batch: Batch, count: int) -> tuple[Batch, list[Batch]]:
    """The first ``count`` examples, and the rest (as a list, empty if none)."""
    rest = batch.examples(count, len(batch))
    return _head(batch, count), [rest] if len(rest) else []
