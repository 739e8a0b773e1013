"""``Ahead``: an iterator drawn in a thread of its own, in order, its errors in order, and
stopped when its reader stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from online_ctr.learning.ahead import Ahead


def drawers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("test-ahead")]


def test_every_item_in_order_drawn_in_another_thread() -> None:
    threads: list[str] = []

    def items() -> Iterator[int]:
        for i in range(50):
            threads.append(threading.current_thread().name)
            yield i

    assert list(Ahead(items(), 3, "test-ahead")) == list(range(50))
    assert len(threads) == 50 and all(name.startswith("test-ahead") for name in threads)
    assert not drawers()


def test_it_draws_from_the_moment_it_is_made_at_most_depth_ahead() -> None:
    drawn: list[int] = []
    two_drawn = threading.Event()

    def items() -> Iterator[int]:
        for i in range(10):
            drawn.append(i)
            if len(drawn) == 2:
                two_drawn.set()
            yield i

    ahead = Ahead(items(), 2, "test-ahead")
    assert two_drawn.wait(10)  # before anything is asked of it
    reading = iter(ahead)
    assert next(reading) == 0
    assert next(reading) == 1
    reading.close()  # the reader stops: so does the drawing
    assert not drawers()
    assert drawn == list(range(len(drawn))) and len(drawn) <= 4


def test_an_error_comes_out_where_its_item_would_have() -> None:
    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("line 3 is not a Criteo row")

    got: list[int] = []
    with pytest.raises(ValueError, match="line 3"):
        for item in Ahead(items(), 2, "test-ahead"):
            got.append(item)
    assert got == [1, 2]
    assert not drawers()


def test_an_empty_iterator_and_a_depth_below_one() -> None:
    assert list(Ahead(iter([]), 1, "test-ahead")) == []
    with pytest.raises(ValueError, match="depth must be >= 1, got 0"):
        Ahead(iter([1]), 0, "test-ahead")
