"""The windowed AUC is the exact AUC of the last W pairs of the stream, whatever the batches."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from online_ctr.learning.stream_metrics import auc
from online_ctr.learning.window_auc import AucWindow


def stream(seed: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = np.round(rng.random(size), 2)  # two decimals: ties in every window
    y = (rng.random(size) < p).astype(np.float64)
    return p, y


def batch_bounds(seed: int, size: int) -> list[tuple[int, int]]:
    """Random cuts of ``range(size)`` into batches of 1 to 700."""
    rng = np.random.default_rng(seed)
    cuts = np.cumsum(rng.integers(1, 700, size))
    cuts = np.concatenate(([0], cuts[cuts < size], [size]))
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("size", [1, 97, 1_000, 5_000])
def test_equals_the_exact_auc_of_the_last_w_after_every_batch(seed: int, size: int) -> None:
    p, y = stream(seed, 20_000)
    window = AucWindow(size)
    for start, stop in batch_bounds(seed, len(p)):
        window.add(p[start:stop], y[start:stop])
        first = max(0, stop - size)
        expected = auc(p[first:stop], y[first:stop])
        np.testing.assert_equal(window.auc(), expected)  # nan where one class only
        assert len(window) == stop - first
        assert window.seen == stop


def test_wraps_around_one_pair_at_a_time() -> None:
    p, y = stream(seed=7, size=50)
    window = AucWindow(8)
    for index in range(len(p)):
        window.add(p[index : index + 1], y[index : index + 1])
    assert window.auc() == auc(p[-8:], y[-8:])
    assert len(window) == 8


def test_a_batch_longer_than_the_window_keeps_its_tail() -> None:
    p, y = stream(seed=3, size=1_000)
    window = AucWindow(64)
    window.add(p[:10], y[:10])  # the ring's end is not at 0 when the long batch comes
    window.add(p[10:], y[10:])
    assert window.auc() == auc(p[-64:], y[-64:])


def test_a_window_larger_than_the_stream_holds_all_of_it() -> None:
    p, y = stream(seed=5, size=3_000)
    window = AucWindow(100_000)
    window.add(p[:1_234], y[:1_234])
    window.add(p[1_234:], y[1_234:])
    assert len(window) == 3_000
    assert window.auc() == auc(p, y)


def test_one_class_only_is_nan_and_so_is_empty() -> None:
    window = AucWindow(10)
    assert math.isnan(window.auc())
    window.add([0.2, 0.7, 0.4], [0, 0, 0])
    assert math.isnan(window.auc())
    window.add([0.5], [1])
    assert window.auc() == 2 / 3


def test_a_click_leaving_the_window_makes_it_undefined_again() -> None:
    window = AucWindow(2)
    window.add([0.9, 0.1, 0.3], [1, 0, 0])
    assert math.isnan(window.auc())


def test_clear_forgets_everything() -> None:
    window = AucWindow(4)
    window.add([0.9, 0.1], [1, 0])
    window.clear()
    assert len(window) == window.seen == 0
    assert math.isnan(window.auc())
    window.add([0.3, 0.6], [1, 0])
    assert window.auc() == 0.0


def test_memory_is_allocated_once_and_bounded_by_the_window() -> None:
    window = AucWindow(1_000)
    buffers = window._p, window._y
    p, y = stream(seed=2, size=10_000)
    window.add(p, y)
    assert window._p is buffers[0] and window._y is buffers[1]
    assert window._p.nbytes + window._y.nbytes == 9 * 1_000


@pytest.mark.parametrize(
    ("probabilities", "labels", "message"),
    [
        ([0.1, 0.2], [1], "one length"),
        ([[0.1]], [[1]], "1-d"),
        ([0.1, 0.2], [1, 2], "0 or 1"),
    ],
)
def test_refuses_malformed_batches(probabilities: Any, labels: Any, message: str) -> None:
    window = AucWindow(4)
    with pytest.raises(ValueError, match=message):
        window.add(probabilities, labels)
    assert window.seen == 0


def test_refuses_an_empty_window() -> None:
    with pytest.raises(ValueError, match=">= 1"):
        AucWindow(0)
