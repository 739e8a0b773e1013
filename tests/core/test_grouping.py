"""The linear-time grouping equals ``np.unique(ids, return_inverse=True)`` exactly."""

from __future__ import annotations

import numpy as np
import pytest

from online_ctr.learning.grouping import SMALL, unique_inverse


def _reference(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    unique, inverse = np.unique(ids, return_inverse=True)
    return unique, inverse.ravel()


@pytest.mark.parametrize("seed", range(5))
def test_equals_numpy_unique_on_skewed_batches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**64, 5_000, dtype=np.uint64, endpoint=False)
    ids = pool[np.minimum(rng.zipf(1.3, 50_000), len(pool)) - 1]
    got, want = unique_inverse(ids), _reference(ids)
    assert got[0].dtype == np.uint64
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])


@pytest.mark.parametrize(
    "ids",
    [
        np.arange(SMALL * 3, dtype=np.uint64),  # consecutive: one slot run each
        np.zeros(SMALL, dtype=np.uint64),  # one id, repeated
        np.full(SMALL, 2**64 - 1, dtype=np.uint64),  # the largest id
        # Ids equal in their low 32 bits: the fold of the high bits keeps them apart.
        (np.arange(SMALL, dtype=np.uint64) << np.uint64(32)) | np.uint64(5),
        np.array([], dtype=np.uint64),
    ],
)
def test_equals_numpy_unique_on_edge_cases(ids: np.ndarray) -> None:
    got, want = unique_inverse(ids), _reference(ids)
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])
    assert got[1].dtype == np.intp


def test_the_inverse_rebuilds_the_ids() -> None:
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 1_000, 3 * SMALL, dtype=np.uint64)
    unique, inverse = unique_inverse(ids)
    assert np.array_equal(unique[inverse], ids)
    assert np.all(np.diff(unique.astype(np.float64)) > 0)
