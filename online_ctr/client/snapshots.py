"""What the clients' ``export_model`` and ``import_model`` share: the route, where a
downloaded snapshot goes, and where an uploaded one comes from. Both stream: a model larger
than memory moves through in pieces of :data:`PIECE_BYTES`.

A download into a path is written to ``<path>.partial`` and renamed when complete, so the
path never holds a truncated snapshot. An upload from a path (or a seekable file) can be sent
again on a retry; one from a pipe cannot, and is tried once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO, cast
from urllib.parse import quote

#: The media type of a snapshot file.
SNAPSHOT_TYPE = "application/vnd.online-ctr.snapshot"
#: Bytes read from a file per piece of an upload.
PIECE_BYTES = 1 << 20

#: A snapshot's place: a path, or an open binary file.
Target = str | os.PathLike[str] | BinaryIO


def route(name: str) -> str:
    """The snapshot route of model ``name``."""
    return f"/models/{quote(name, safe='')}/snapshot"


def _path(target: Target) -> Path | None:
    """The target's path, or None for an open file."""
    return Path(os.fspath(target)) if isinstance(target, str | os.PathLike) else None


class Download:
    """Where an export is written: :meth:`write` each piece, then :meth:`done` (or
    :meth:`abandon` on failure)."""

    def __init__(self, target: Target) -> None:
        self.path = _path(target)
        self.written = 0
        self.partial = (
            None if self.path is None else self.path.with_name(self.path.name + ".partial")
        )
        self.out = cast(BinaryIO, target) if self.partial is None else self.partial.open("wb")

    def write(self, piece: bytes) -> None:
        self.out.write(piece)
        self.written += len(piece)

    def done(self) -> int:
        """Finish the file; the bytes written."""
        self.out.flush()
        if self.partial is not None and self.path is not None:
            self.out.close()
            os.replace(self.partial, self.path)
        return self.written

    def abandon(self) -> None:
        if self.partial is not None:
            self.out.close()
            self.partial.unlink(missing_ok=True)


class Upload:
    """Where an import is read from; :meth:`opened` gives it from its start for each attempt."""

    def __init__(self, source: Target) -> None:
        self.path = _path(source)
        self.stream = cast(BinaryIO, source)
        self.start = None if self.path is not None else _position(self.stream)
        #: Whether a second attempt can send the same bytes again.
        self.repeatable = self.path is not None or self.start is not None

    @contextlib.contextmanager
    def opened(self) -> Iterator[BinaryIO]:
        if self.path is not None:
            with self.path.open("rb") as stream:
                yield stream
            return
        if self.start is not None:
            self.stream.seek(self.start)
        yield self.stream


def _position(stream: BinaryIO) -> int | None:
    try:
        return stream.tell() if stream.seekable() else None
    except OSError:
        return None


def pieces(stream: BinaryIO) -> Iterator[bytes]:
    """The stream's bytes in pieces (what httpx sends as a chunked body)."""
    while piece := stream.read(PIECE_BYTES):
        yield piece


async def apieces(stream: BinaryIO) -> AsyncIterator[bytes]:
    """:func:`pieces` for the asyncio client (local file reads are short: read inline)."""
    for piece in pieces(stream):
        yield piece
