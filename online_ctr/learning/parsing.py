"""A Criteo file parsed by pyarrow's CSV reader, block by block, in a thread of its own.

This module is the part of the column-at-a-time reader (:mod:`online_ctr.learning.columnar`) that
needs neither numba nor the kernels: ``online-ctr replay`` starts a :class:`Parsing` before it
imports and loads them, so that the file's first blocks are parsed on the other core meanwhile.
A :class:`Parsing` imports pyarrow's CSV module as it is made (:func:`prepare`), in the
caller's thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

from online_ctr.learning.ahead import Ahead
from online_ctr.learning.readers import CRITEO_COLUMNS


def available() -> bool:
    """Whether pyarrow is installed (the ``replay`` extra)."""
    return find_spec("pyarrow") is not None


#: Bytes of the file parsed at a time: bounds memory whatever the file's size. Blocks of 4 MiB
#: parsed 200,000 rows in about half the time blocks of 16 MiB took: the reader parses the next
#: block while this one is encoded (and the first one while the replay starts up).
BLOCK_BYTES = 1 << 22


class Unreadable(ValueError):
    """A value the row reader would refuse (it finds which line, and says what is wrong)."""


def prepare() -> None:
    """Import pyarrow's CSV module, before a :class:`Parsing` starts: imported in the parser's
    thread, it took the GIL in turns with the replay's import of numba, and the first block
    was parsed only as that import ended (200,000 rows: at 286 ms of the process against 187
    ms imported first, ~30 ms of import)."""
    import pyarrow.csv  # noqa: F401


def record_batches(path: str | os.PathLike[str]) -> Iterator[Any]:
    """The file's columns as bytes (not checked for UTF-8), block by block, split on the
    separator and nothing else (no quoting), as the row reader splits them."""
    import pyarrow as pa
    import pyarrow.csv as csv

    with open(path, "rb") as stream:
        first = stream.readline().decode("utf-8", "replace")
    separator = "\t" if "\t" in first else ","
    header = first.split(separator, 1)[0] == "label"
    if header and tuple(first.rstrip("\r\n").split(separator)) != CRITEO_COLUMNS:
        raise Unreadable("header")
    # Dictionary-encoded as parsed: each block's columns arrive as distinct values and codes.
    # As bytes, not checked for UTF-8 here: the column reader decodes each distinct value the
    # first time it meets it (:class:`online_ctr.learning.columnar.ColumnIds`), which checks
    # every field once, where pyarrow's check read every field of every block (200,000 rows,
    # parsing alone: 0.26-0.30 CPU-seconds against 0.30-0.40).
    text = pa.dictionary(pa.int32(), pa.binary())
    parse_options = csv.ParseOptions(
        delimiter=separator,
        quote_char=False,
        double_quote=False,
        escape_char=False,
        ignore_empty_lines=False,
    )
    convert_options = csv.ConvertOptions(
        column_types=dict.fromkeys(CRITEO_COLUMNS, text),
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
        check_utf8=False,
    )
    for source, skip, size in _pieces(path, header):
        read_options = csv.ReadOptions(
            column_names=list(CRITEO_COLUMNS), skip_rows=skip, block_size=size, use_threads=False
        )
        yield from csv.open_csv(source, read_options, parse_options, convert_options)


#: Blocks parsed ahead of their use, at most (48 MiB of the file). While the replay starts up
#: (where its kernels are not precompiled, numba's import and their loading, ~0.25 s) nothing
#: uses them, and the parser, which
#: releases the GIL, can parse 200,000 Criteo rows (12 blocks) in that time on the other core;
#: two blocks ahead, it waited for the start-up to end. Whole process, medians of paired runs
#: (``python -m loadtests.costs.replay_process --rounds 3 --against``), 12 against 2: 200,000
#: rows 0.603 s against 0.648, 2,000,000 rows 3.108 against 3.159; with :func:`prepare` too,
#: 0.597 against 0.650 and 3.093 against 3.247 (``--rounds 4``). Peak memory of a replay of
#: 2,000,000 rows: 822 MB against 793. (Earlier, on a machine at load ~10, more blocks ahead
#: had cost CPU: 1.099 s one block ahead, 1.138 s two, 1.152 s eight.)
AHEAD = 12


#: The names' endings by which pyarrow decompresses a file it is given by name.
COMPRESSED = (".bz2", ".gz", ".lz4", ".zst")


#: Bytes of the file's first block, at most: a block this small is parsed and encoded in about
#: a quarter of the time a whole one takes, so the learning starts ~65 ms sooner, while the
#: rest of the start-up would otherwise leave a core idle (200,000 rows, whole process, 16
#: runs each: 0.563 s against 0.577).
FIRST_BYTES = 1 << 20


def _pieces(path: str | os.PathLike[str], header: bool) -> Iterator[tuple[Any, int, int]]:
    """What pyarrow reads, in order, each with the rows to skip first and its block size: a
    file on disk as its first :data:`FIRST_BYTES` (up to the end of the line they end in),
    parsed as one block, then the rest in blocks of :data:`BLOCK_BYTES`; a compressed file
    whole (pyarrow decompresses it as it reads)."""
    import pyarrow as pa

    source = _source(path)
    if isinstance(source, str):
        yield source, int(header), BLOCK_BYTES
        return
    whole = source.read_buffer()
    with open(path, "rb") as stream:
        stream.seek(FIRST_BYTES)
        stream.readline()
        cut = stream.tell()
    if cut >= whole.size:
        yield pa.BufferReader(whole), int(header), BLOCK_BYTES
        return
    yield pa.BufferReader(whole.slice(0, cut)), int(header), cut
    yield pa.BufferReader(whole.slice(cut)), 0, BLOCK_BYTES


def _source(path: str | os.PathLike[str]) -> Any:
    """What pyarrow reads ``path`` from: the file memory-mapped, so that the parser reads the
    kernel's cached pages where they are instead of copying each block into memory of its own,
    fresh pages that the kernel zeroes first (200,000 rows: 0.10 s of system time against
    0.22-0.30, three runs each); a compressed file by name, which pyarrow decompresses."""
    import pyarrow as pa

    name = os.fspath(path)
    return name if name.endswith(COMPRESSED) else pa.memory_map(name)


class Parsing(Ahead[Any]):
    """A Criteo file's blocks, each parsed in another thread up to :data:`AHEAD` blocks
    ahead of its use, from the moment this is made. pyarrow parses a block only when asked for
    it, and it releases the GIL while it parses, so the parsing overlaps the hashing and
    learning of the blocks before (200,000 rows: the main thread waited about 0.45 s for the
    parser without this). Made before numba is imported, the first blocks' parse (the
    reader's opening and the blocks, pyarrow imported already) overlaps that import and the
    warm-up. An error comes out in order. Iterate it once.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        prepare()
        super().__init__(record_batches(path), AHEAD, "criteo-reader")
