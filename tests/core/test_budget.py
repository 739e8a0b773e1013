"""One budget over many tables: the sum stays within the limit, the largest table pays, and
a forgotten table costs time, never a different answer (issue 33: the API's tables)."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest

from online_ctr.learning.budget import Budget
from online_ctr.learning.features import FeatureHasher


class Table:
    def __init__(self, held: int) -> None:
        self.size = held

    def held(self) -> int:
        return self.size

    def forget(self) -> None:
        self.size = 0


def test_the_largest_tables_are_emptied_until_the_sum_fits() -> None:
    forgotten: list[None] = []
    budget = Budget(50, lambda: forgotten.append(None))
    a, b, c = (budget.track(Table(n)) for n in (20, 50, 60))
    assert budget.fit() == 2  # 130: c (60) goes, 70: b (50) goes, 20 fits
    assert (a.size, b.size, c.size) == (20, 0, 0)
    assert budget.forgotten == len(forgotten) == 2


def test_only_what_is_needed_is_emptied() -> None:
    budget = Budget(100)
    a, b, c = (budget.track(Table(n)) for n in (20, 50, 60))
    assert budget.fit() == 1
    assert (a.size, b.size, c.size) == (20, 50, 0)
    assert budget.held() == 70


def test_a_table_dropped_by_its_owner_leaves_the_sum() -> None:
    budget = Budget(100)
    kept = budget.track(Table(40))
    dropped = budget.track(Table(90))
    del dropped
    gc.collect()
    assert budget.held() == 40
    assert budget.fit() == 0 and kept.size == 40


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Budget(0)


def test_the_hashers_cache_is_counted_and_stays_within_its_budget() -> None:
    budget = Budget(600_000)  # two or so batches' names (~260 B each)
    hasher = FeatureHasher(budget=budget)
    plain = FeatureHasher()
    for start in range(0, 20_000, 1000):
        rows = [{"user": f"u{i}", "hour": i % 24} for i in range(start, start + 1000)]
        # Through JSON, as the API's slow path receives them: new str objects each time.
        rows = json.loads(json.dumps(rows))
        got, want = hasher.batch(rows), plain.batch(rows)
        assert np.array_equal(got.ids, want.ids)  # forgetting never changes an id
        assert budget.held() <= budget.limit
    assert budget.forgotten > 0
    assert 0 < hasher.held() <= budget.limit


def test_the_hashers_bytes_grow_with_each_new_name_only() -> None:
    hasher = FeatureHasher()
    hasher.batch([{"site": "news"}])
    one = hasher.held()
    hasher.batch([{"site": "news"}, {"site": "news"}])
    assert hasher.held() == one
    hasher.batch([{"site": "x" * 1000}])
    assert hasher.held() - one >= 1000
    hasher.forget()
    assert hasher.held() == 0
