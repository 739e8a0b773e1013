"""A one-line progress bar for a terminal, redrawn in place: no dependency needed for this."""

from __future__ import annotations

import os
import time
from typing import TextIO

#: Redraws at most this often: a terminal write per batch would slow batch size 1 down.
REDRAW_INTERVAL_S = 0.1


def render(done: int, total: int | None, note: str = "", width: int = 30) -> str:
    """The bar's text for ``done`` of ``total`` items (``total`` unknown: a counter only).

    >>> render(25, 100, "logloss 0.5", width=10)
    '[##........]  25% 25/100 logloss 0.5'
    >>> render(7, None)
    '7'
    """
    if not total:
        return f"{done:,} {note}".rstrip()
    fraction = min(done / total, 1.0)
    filled = int(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    return f"[{bar}] {fraction:4.0%} {done:,}/{total:,} {note}".rstrip()


def count_lines(path: str | os.PathLike[str], chunk_bytes: int = 1 << 20) -> int:
    """How many lines a file has (a last line without newline counts), reading it in chunks."""
    lines, last = 0, b"\n"
    with open(path, "rb") as stream:
        while chunk := stream.read(chunk_bytes):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n")


class ProgressBar:
    """Redraws :func:`render` on ``stream`` at most every :data:`REDRAW_INTERVAL_S`."""

    def __init__(self, stream: TextIO, total: int | None) -> None:
        self.stream = stream
        self.total = total
        self._drawn_at = -REDRAW_INTERVAL_S
        self._width = 0

    def update(self, done: int, note: str = "") -> None:
        """Show ``done`` items, unless the bar was drawn a moment ago."""
        now = time.monotonic()
        if now - self._drawn_at >= REDRAW_INTERVAL_S:
            self._draw(render(done, self.total, note))
            self._drawn_at = now

    def close(self, done: int, note: str = "") -> None:
        """Draw the finished state (all of ``done``) and end the line."""
        self._draw(render(done, done or None, note))
        self.stream.write("\n")
        self.stream.flush()

    def _draw(self, text: str) -> None:
        # Pad over the previous text: a shorter line would leave its tail on screen.
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)
