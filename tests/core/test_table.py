"""The state table finds and inserts exactly what a dict would, through every growth."""

from __future__ import annotations

import numpy as np

from online_ctr.learning.table import StateTable
from workers.cache import StateCache


def test_table_agrees_with_a_dict_through_growth_and_colliding_slots() -> None:
    rng = np.random.default_rng(7)
    table, expected = StateTable(width=1, capacity=16), dict[int, int]()
    for round_ in range(40):
        # Ids whose halves xor to the same low 12 bits (one of two) collide in the slots,
        # which fold the high half into the low one: long probes, wrap-around.
        high = rng.integers(0, 2**32, 300, dtype=np.uint64)
        low = high ^ (rng.integers(0, 2**20, 300, dtype=np.uint64) << np.uint64(12))
        low ^= rng.integers(0, 2, 300, dtype=np.uint64)
        fresh = (high << np.uint64(32)) | (low & np.uint64(2**32 - 1))
        known = np.fromiter(expected, np.uint64) if expected else fresh[:0]
        asked = np.unique(np.concatenate([fresh, rng.choice(known, min(len(known), 200))]))
        rows = table.rows(asked, create=True)
        for feature, row in zip(asked.tolist(), rows.tolist(), strict=True):
            assert expected.setdefault(feature, row) == row
        table.data[rows, 0] = round_
        absent = rng.integers(0, 2**64 - 1, 50, dtype=np.uint64, endpoint=True)
        absent = absent[~np.isin(absent, asked) & ~np.isin(absent, known)]
        assert (table.rows(absent, create=False) == -1).all()
    everything = np.fromiter(expected, np.uint64)
    assert len(table) == len(expected) == len(set(expected.values()))
    assert table.rows(everything, create=False).tolist() == list(expected.values())
    assert (table.ids[table.rows(everything, create=False)] == everything).all()


def test_a_trimmed_cache_keeps_the_most_recently_used_half_with_their_state() -> None:
    cache = StateCache(width=2, max_features=1000)
    for use in range(12):  # 1,200 features, 100 per use; trimmed before it passes the bound
        ids = np.arange(use * 100, (use + 1) * 100, dtype=np.uint64) * np.uint64(2**40 + 1)
        rows = cache.insert(ids, np.zeros((100, 2)), np.zeros(100, bool))
        cache.update(rows, np.column_stack([ids.astype(float), np.full(100, use)]))
    cache.trim()
    assert len(cache) == 500
    newest = np.arange(700, 1200, dtype=np.uint64) * np.uint64(2**40 + 1)
    rows = cache.find(newest)
    assert (rows >= 0).all() and cache.stored(rows).all()
    np.testing.assert_array_equal(cache.state(rows)[:, 0], newest.astype(float))
    assert (cache.find(np.arange(700, dtype=np.uint64) * np.uint64(2**40 + 1)) == -1).all()
    # The room left for max_features: the way back up to the bound never rehashes.
    slots = len(cache.table._slot_rows)
    cache.insert(np.arange(1, 501, dtype=np.uint64), np.zeros((500, 2)), np.zeros(500, bool))
    assert len(cache) == 1000 and len(cache.table._slot_rows) == slots


def test_keep_moves_the_kept_rows_down_in_order_and_the_table_goes_on() -> None:
    rng = np.random.default_rng(11)
    table = StateTable(width=2, capacity=64)
    ids = np.unique(rng.integers(0, 2**64 - 1, 3000, dtype=np.uint64, endpoint=True))
    rows = table.rows(ids, create=True)
    table.data[rows] = np.column_stack([ids.astype(float), rows.astype(float)])
    slots = len(table._slot_rows)
    kept = rng.choice(len(ids), 1000, replace=False)  # any order: rows keep theirs
    table.keep(rows[kept])
    order = np.sort(rows[kept])
    assert len(table) == 1000 and len(table._slot_rows) == slots
    np.testing.assert_array_equal(table.data[:1000, 1], order.astype(float))
    survivors = table.ids[:1000]
    assert table.rows(survivors, create=False).tolist() == list(range(1000))
    np.testing.assert_array_equal(table.data[:1000, 0], survivors.astype(float))
    dropped = np.setdiff1d(ids, survivors)
    assert len(dropped) == 2000 and (table.rows(dropped, create=False) == -1).all()
    again = table.rows(dropped[:5], create=True)  # new rows after the kept ones, at zero
    assert again.tolist() == list(range(1000, 1005)) and not table.data[again].any()
    table.keep(np.array([], np.intp))
    assert len(table) == 0 and (table.rows(ids, create=False) == -1).all()


def test_state_of_copies_the_rows_and_puts_the_absent_row_where_there_is_none() -> None:
    table = StateTable(width=3, capacity=16)
    ids = np.array([5, 9, 2**63 + 1], np.uint64)
    table.data[table.rows(ids, create=True)] = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [-0.0, 8, 9]]
    absent = np.array([0.0, 1.5, -2.0])
    asked = np.array([2**63 + 1, 7, 5, 7], np.uint64)
    state, rows = table.state_of(asked, absent)
    assert rows.tolist() == table.rows(asked, create=False).tolist()
    expected = np.array([[-0.0, 8, 9], absent, [1.0, 2, 3], absent])
    assert state.tobytes() == expected.tobytes()
    state[0, 0] = 99.0  # a copy: the table is left as it was
    assert table.data[rows[0], 0] == 0.0 and np.signbit(table.data[rows[0], 0])
    assert table.state_of(asked[:0], absent)[0].shape == (0, 3)
