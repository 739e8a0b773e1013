"""The readers on every click log in the shared data folder, and on broken lines.

The Open Bandit item tables (``obd/*_item_context.csv``) are not click logs: detection refuses
them (``test_replay_ergonomics.py``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from online_ctr.learning.readers import ReaderError, read_examples

CRITEO_HEADER = ",".join(
    ["label"] + [f"I{j}" for j in range(1, 14)] + [f"C{j}" for j in range(1, 27)]
)


@pytest.mark.parametrize(
    ("relative", "fmt", "rows", "positives"),
    [
        ("criteo/criteo_kaggle_train_head10k.tsv", "criteo", 10_000, 2_182),
        ("criteo/criteo_deepctr_sample200.csv", "criteo", 200, 49),
        ("avazu/avazu_train_head10k.csv", "avazu", 9_999, 1_706),
        ("ipinyou/ipinyou_train.fm.txt", "libfm", 26_773, 255),
        ("obd/obd_random_men.csv", "obd", 10_000, 46),
        ("obd/obd_random_women.csv", "obd", 10_000, 46),
    ],
)
def test_data_files_match_the_readme(
    data_dir: Path, relative: str, fmt: str, rows: int, positives: int
) -> None:
    examples = list(read_examples(data_dir / relative, fmt))
    assert len(examples) == rows
    assert sum(label for _, label in examples) == positives
    assert {label for _, label in examples} == {0, 1}
    assert all(example for example, _ in examples)


def test_criteo_tsv_buckets_counts_and_drops_empty_fields(data_dir: Path) -> None:
    path = data_dir / "criteo" / "criteo_kaggle_train_head10k.tsv"
    example, label = next(read_examples(path, "criteo"))
    # Raw: 1 1 5 0 1382 4 15 2 181 1 2 <empty> 2; C22 is empty.
    assert label == 0
    assert [example.get(f"I{j}") for j in range(1, 14)] == [
        "1", "1", "2", "0", "52", "1", "7", "2", "27", "1", "2", None, "2",
    ]  # fmt: skip
    assert example["C1"] == "68fd1e64"
    assert example["C26"] == "9727dd16"
    assert "C22" not in example
    assert len(example) == 37


def test_criteo_csv_sample_reads_float_counts(data_dir: Path) -> None:
    path = data_dir / "criteo" / "criteo_deepctr_sample200.csv"
    first, second = (example for example, _ in read_examples(path, "criteo", limit=2))
    assert first["I3"] == str(int(math.log(260) ** 2)) == "30"
    assert first["I12"] == "0"
    assert "I1" not in first
    assert second["I2"] == "-1"


def test_criteo_csv_and_tsv_agree_on_their_shared_rows(data_dir: Path) -> None:
    def parsed(name: str) -> list[tuple[tuple[tuple[str, object], ...], int]]:
        rows = read_examples(data_dir / "criteo" / name, "criteo")
        return [(tuple(sorted(example.items())), label) for example, label in rows]

    head = set(parsed("criteo_kaggle_train_head10k.tsv"))
    shared = [row for row in parsed("criteo_deepctr_sample200.csv") if row in head]
    # The data README says 14; comparing the raw columns (260.0 read as 260) gives 19 too.
    assert len(shared) == 19


def test_avazu_drops_id_and_click_and_keeps_the_hour_of_day(data_dir: Path) -> None:
    path = data_dir / "avazu" / "avazu_train_head10k.csv"
    example, label = next(read_examples(path, "avazu"))
    assert label == 0
    assert "id" not in example
    assert "click" not in example
    assert example["hour"] == "0"
    assert example["site_id"] == "1fbe01fe"
    assert example["C20"] == "-1"
    assert len(example) == 22


def test_ipinyou_rows_have_16_unit_features(data_dir: Path) -> None:
    examples = read_examples(data_dir / "ipinyou" / "ipinyou_train.fm.txt", "libfm", limit=500)
    for example, _ in examples:
        assert len(example) == 16
        assert set(example.values()) == {1.0}
        assert all(name.isdecimal() for name in example)


OBD_FEATURES = {
    "item_id", "position", "user-item_affinity", *(f"user_feature_{j}" for j in range(4))
}  # fmt: skip


@pytest.mark.parametrize("who", ["men", "women"])
def test_obd_rows_are_impressions_with_the_shown_items_affinity(data_dir: Path, who: str) -> None:
    rows = list(read_examples(data_dir / "obd" / f"obd_random_{who}.csv", "obd"))
    assert {name for example, _ in rows for name in example} == OBD_FEATURES
    assert all(len(example) == len(OBD_FEATURES) for example, _ in rows)
    assert {example["position"] for example, _ in rows} == {"1", "2", "3"}
    # The affinity is a number (bucketed like any other by the hasher); mostly 0 here.
    assert all(isinstance(example["user-item_affinity"], float) for example, _ in rows)


def test_obd_takes_the_shown_items_own_affinity(tmp_path: Path) -> None:
    header = ",timestamp,item_id,position,click,propensity_score,"
    header += ",".join(f"user_feature_{j}" for j in range(4))
    header += ",user-item_affinity_0,user-item_affinity_1"
    path = write(tmp_path, f"{header}\n7,2019-11-24,1,2,1,0.5,a,b,c,d,0.25,3.0\n")
    assert list(read_examples(path, "obd")) == [
        (
            {
                "item_id": "1", "position": "2", "user_feature_0": "a", "user_feature_1": "b",
                "user_feature_2": "c", "user_feature_3": "d", "user-item_affinity": 3.0,
            },
            1,
        )
    ]  # fmt: skip


def write(tmp_path: Path, text: str, name: str = "log.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8", newline="")
    return path


def criteo_line(label: str = "0", count: str = "3", category: str = "ab") -> str:
    return "\t".join([label, count] + [""] * 12 + [category] * 26)


OBD_HEADER = ",timestamp,item_id,position,click,propensity_score," + ",".join(
    [*(f"user_feature_{j}" for j in range(4)), "user-item_affinity_0"]
)


@pytest.mark.parametrize(
    ("fmt", "text", "line", "what"),
    [
        ("criteo", criteo_line() + "\n" + "1\t2\t3\n", 2, "expected 40 columns, got 3"),
        ("criteo", criteo_line(label="2") + "\n", 1, "label must be 0 or 1, got '2'"),
        ("criteo", criteo_line(label="") + "\n", 1, "label must be 0 or 1, got ''"),
        ("criteo", criteo_line(count="2.5") + "\n", 1, "count '2.5' is not an integer"),
        ("criteo", criteo_line(count="x") + "\n", 1, "count 'x' is not an integer"),
        ("criteo", "label,I1\n", 1, "header is not label"),
        ("avazu", "id,click,hour\n1,0,14102100\n2,0,141021\n", 3, "hour '141021' is not YYMMDDHH"),
        ("avazu", "id,click,hour\n1,0,14102199\n", 2, "hour '14102199' is not YYMMDDHH"),
        ("avazu", "id,click,hour\n1,0\n", 2, "expected 3 columns, got 2"),
        ("avazu", "id,clicks,hour\n", 1, "the header has no 'click' column"),
        ("avazu", "id,click,hour\n1,yes,14102100\n", 2, "label must be 0 or 1, got 'yes'"),
        ("libfm", "0 1:1\n1 2-1\n", 2, "token '2-1' is not idx:val"),
        ("libfm", "0 x:1\n", 1, "token 'x:1' is not idx:val"),
        ("libfm", "0 3:abc\n", 1, "value 'abc' is not a number"),
        ("libfm", "0 3:inf\n", 1, "value 'inf' is not finite"),
        ("libfm", "-1 3:1\n", 1, "label must be 0 or 1, got '-1'"),
        ("libfm", "0 3:1\n\n1 3:1\n", 2, "empty line"),
        ("obd", ",item_id,click\n", 1, "header needs position, user_feature_0"),
        ("obd", OBD_HEADER + "\n0,t,5,1,0,0.5,a,b,c,d,0.0\n", 2, "item_id '5' has no"),
        ("obd", OBD_HEADER + "\n0,t,0,1,2,0.5,a,b,c,d,0.0\n", 2, "label must be 0 or 1"),
        ("obd", OBD_HEADER + "\n0,t,0,1,0,0.5,a,b,c,d,x\n", 2, "value 'x' is not a number"),
        ("obd", OBD_HEADER + "\n0,t,0,1,0\n", 2, "expected 11 columns, got 5"),
    ],
)
def test_broken_lines_name_the_file_and_line(
    tmp_path: Path, fmt: str, text: str, line: int, what: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ReaderError) as caught:
        list(read_examples(path, fmt))
    assert str(caught.value).startswith(f"{path}, line {line}: ")
    assert what in str(caught.value)
    assert (caught.value.path, caught.value.line) == (str(path), line)


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(b"0 1:1\n0 2:1\n1 \xff:1\n")
    with pytest.raises(ReaderError, match=r"line 3: not UTF-8"):
        list(read_examples(path, "libfm"))


def test_lines_after_the_limit_are_not_read(tmp_path: Path) -> None:
    path = write(tmp_path, "1 1:1\n0 2:1\nbroken\n")
    assert [label for _, label in read_examples(path, "libfm", limit=2)] == [1, 0]
    assert list(read_examples(path, "libfm", limit=0)) == []


def test_windows_line_endings_and_repeated_libfm_indices(tmp_path: Path) -> None:
    path = write(tmp_path, "1 7:0.5 7:0.25 8:2\r\n")
    assert list(read_examples(path, "libfm")) == [({"7": 0.75, "8": 2.0}, 1)]
    csv = write(tmp_path, "id,click,hour,site\r\n9,1,14102123,\r\n", name="avazu.csv")
    assert list(read_examples(csv, "avazu")) == [({"hour": "23"}, 1)]


def test_arguments_are_checked_before_reading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown format 'svm'"):
        read_examples(tmp_path / "missing", "svm")
    with pytest.raises(ValueError, match="limit must be >= 0"):
        read_examples(tmp_path / "missing", "libfm", limit=-1)
