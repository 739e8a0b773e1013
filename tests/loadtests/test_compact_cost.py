"""The compact-cost command runs for real on tiny sizes and prints both tables (no figure is
asserted but their shape and what must hold at any size)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from loadtests.costs import compact_cost
from online_ctr.cli.embedded import RedisServer
from testkit.ports import free_port


def test_bytes_per_feature_fills_each_configuration(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", port=free_port(), persist=False) as server:
        rows = [
            asyncio.run(compact_cost.bytes_per_feature(server.url, encoding, bits, 3_000))
            for encoding, bits in compact_cost.CONFIGURATIONS
        ]
    assert [row[:3] for row in rows] == [
        ["float64", "64", "6 + 16"],
        ["compact", "64", "6 + 4"],
        ["compact", "42", "3 + 4"],
    ]
    assert all(row[3] == "3,000" and row[4] == "0" for row in rows)
    float64, compact, _ = (float(row[5]) for row in rows)
    assert compact < float64  # 12 bytes less per feature in the same buckets


def test_the_loss_table_covers_every_click_log_and_names_the_others() -> None:
    table = compact_cost.loss_table(limit=100)
    lines = table.splitlines()
    rows = [line.split(" | ") for line in lines[2:] if line.startswith("| ")]
    files = {row[0].lstrip("| ") for row in rows}
    assert files == {
        "avazu_train_head10k.csv",
        "criteo_deepctr_sample200.csv",
        "criteo_kaggle_train_head10k.tsv",
        "ipinyou_train.fm.txt",
        "obd_random_men.csv",
        "obd_random_women.csv",
    }
    assert sorted({row[1] for row in rows}) == ["ftrl", "l1sgd"]
    assert lines[-1].startswith("Not click logs (refused by replay): featindex.fm.txt, obd_")
