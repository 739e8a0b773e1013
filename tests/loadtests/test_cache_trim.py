"""The cache-trim command runs on a tiny cache, and its baseline keeps what a trim keeps."""

from __future__ import annotations

import numpy as np
import pytest

from loadtests.costs import cache_trim
from workers.cache import StateCache


def filled(features: int) -> StateCache:
    cache = StateCache(width=2, max_features=features)
    for use in range(features // 50 + 1):
        ids = np.arange(use * 50, (use + 1) * 50, dtype=np.uint64) * np.uint64(2**33 + 7)
        rows = cache.insert(ids, np.zeros((50, 2)), np.zeros(50, np.bool_))
        cache.update(rows, np.column_stack([ids.astype(float), np.full(50, use)]))
    return cache


def test_trim_and_rebuild_keep_the_same_features_with_their_state() -> None:
    trimmed, rebuilt = filled(1_000), filled(1_000)
    trimmed.trim()
    cache_trim.rebuild(rebuilt)
    ids = trimmed.table.ids[: len(trimmed)]
    assert len(trimmed) == len(rebuilt) == 500
    np.testing.assert_array_equal(np.sort(ids), np.sort(rebuilt.table.ids[: len(rebuilt)]))
    np.testing.assert_array_equal(
        trimmed.state(trimmed.find(ids)), rebuilt.state(rebuilt.find(ids))
    )


def test_the_command_prints_both_ways_and_their_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    assert cache_trim.main(["--features", "20000", "--repeats", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["trim", "rebuild", "rebuild / trim"]
    assert float(lines[-1].split(":")[1]) > 0


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--features", "1"], ["--features", "x"]])
def test_a_size_or_count_too_small_is_refused_in_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cache_trim.main(argv)
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and ("must be an integer" in error or "invalid integer" in error)
