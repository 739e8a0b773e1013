"""The crosses benchmark's iPinYou rows, named by the log's dictionary, are the same one-hot
features as the libFM indexes: without crosses the model learns the same log loss on them."""

from __future__ import annotations

import itertools
from pathlib import Path

from loadtests.costs.crosses import LOGS, ipinyou_rows, run
from online_ctr.learning.crosses import parse_crosses
from online_ctr.learning.readers import read_examples
from testkit.paths import DATA_DIR


def test_named_ipinyou_rows_learn_as_the_indexes() -> None:
    path = DATA_DIR / LOGS["ipinyou"][0]
    named = list(ipinyou_rows(path, 3000))
    indexes = list(itertools.islice(read_examples(path, "libfm"), 3000))
    assert len(named) == len(indexes) == 3000
    assert all(len(x) == len(i) and y == z for (x, y), (i, z) in zip(named, indexes, strict=True))
    assert {"advertiser", "domain", "creative", "slotid", "hour"} <= set(named[0][0])
    assert run(named, ()).logloss == run(indexes, ()).logloss
    crossed = run(named, parse_crosses(LOGS["ipinyou"][2]))
    assert crossed.features_tracked > run(named, ()).features_tracked


def test_the_logs_are_the_shared_files(data_dir: Path) -> None:
    assert data_dir.resolve() == DATA_DIR.resolve()
