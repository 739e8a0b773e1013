"""An iterator drawn in a thread of its own, a few items ahead of its use.

What the thread runs overlaps what the caller does with the items before, as far as the GIL
lets it: pyarrow's parser and numba's compiled loops (``nogil``) release it.

>>> list(Ahead(iter(range(5)), 2, "example"))
[0, 1, 2, 3, 4]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")

_END = object()


class Ahead(Generic[T]):
    """``items``, each drawn in another thread up to ``depth`` items ahead of its use, from the
    moment this is made. An error raised by ``items`` comes out in order, where its item
    would have. Iterate it once; leaving the loop early stops the drawing (after the item
    being drawn, if any)."""

    def __init__(self, items: Iterator[T], depth: int, name: str) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._items = items
        # One worker: the futures run in turn, each drawing the item after the one before.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._ahead = deque(self._next() for _ in range(depth))

    def _next(self) -> Future[object]:
        return self._pool.submit(next, self._items, _END)

    def __iter__(self) -> Iterator[T]:
        try:
            while (item := self._ahead.popleft().result()) is not _END:
                self._ahead.append(self._next())
                yield item  # type: ignore[misc]
        finally:
            self._pool.shutdown(cancel_futures=True)
