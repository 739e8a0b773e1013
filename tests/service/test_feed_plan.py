"""``online-ctr feed`` without a service: its batches and their keys, its rate, its target
and what it says (the service itself: tests/integration/test_feed.py)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import pytest

from online_ctr.cli.api_target import ApiTarget, api_target
from online_ctr.cli.feed_plan import IDENTITY_BYTES, batches, file_identity
from online_ctr.cli.feed_sender import Outcome
from online_ctr.cli.feed_text import service_error, summary
from online_ctr.cli.local import API_KEYS_FILE, RECORD_FILE
from online_ctr.cli.main import main
from online_ctr.cli.pacing import Pacer, schedule
from online_ctr.client.errors import ClientError, UnreachableError
from online_ctr.learning.readers import Row, read_examples

ROWS: list[Row] = [({"site": f"s{j}"}, j % 2) for j in range(10)]


def test_batches_cover_the_rows_from_start_once_in_order() -> None:
    plan = list(batches(iter(ROWS), 4, "f", start=3))
    assert [(b.first_row, b.end) for b in plan] == [(3, 7), (7, 10)]
    assert [row for b in plan for row in b.rows] == ROWS[3:]
    assert [b.key for b in plan] == ["feed-f-learn-3", "feed-f-learn-7"]


def test_a_resumed_feed_sends_the_keys_and_rows_of_the_first() -> None:
    whole = list(batches(iter(ROWS), 3, "f"))
    resumed = list(batches(iter(ROWS), 3, "f", start=6))
    assert resumed == whole[2:]
    cut = list(batches(itertools.islice(iter(ROWS), 6), 3, "f"))  # an earlier --limit 6
    assert cut == whole[:2]


def test_join_batches_have_their_own_keys_and_one_id_per_row() -> None:
    (batch,) = batches(iter(ROWS[:3]), 5, "f", mode="join")
    assert batch.key == "feed-f-join-0"
    assert batch.prediction_ids() == ["feed-f-0", "feed-f-1", "feed-f-2"]


def test_batches_refuse_a_size_or_start_out_of_range() -> None:
    with pytest.raises(ValueError, match="size must be >= 1"):
        next(batches(iter(ROWS), 0, "f"))
    with pytest.raises(ValueError, match="start >= 0"):
        next(batches(iter(ROWS), 1, "f", start=-1))


def test_a_file_is_known_by_its_first_mebibyte(tmp_path: Path) -> None:
    first, copy, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    first.write_bytes(b"1\tx\n" * (IDENTITY_BYTES // 4))
    copy.write_bytes(first.read_bytes() + b"0\ty\n")  # a copy, grown by a row
    other.write_bytes(b"0\tx\n" + first.read_bytes()[4:])
    assert file_identity(first) == file_identity(copy) != file_identity(other)
    assert len(file_identity(first)) == 16


def test_the_schedule_never_lets_more_than_the_rate_out() -> None:
    sizes = [300, 300, 17, 1000, 5]
    starts = schedule(sizes, rate=250.0)
    assert starts[0] == 0.0
    for j, at in enumerate(starts):
        assert sum(sizes[:j]) <= 250.0 * at + 1e-9  # sent before this batch, at its start
    assert starts[-1] == sum(sizes[:-1]) / 250.0


class FakeClock:
    """A clock that only the pacer's sleeps move (and a slow request, by hand)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_pacer_waits_as_the_schedule_says_and_makes_up_for_slow_requests() -> None:
    clock = FakeClock()
    pacer = Pacer(100.0, clock, clock.sleep)
    starts = []
    for size in (50, 50, 100, 10):
        pacer.wait(size)
        starts.append(clock.now - 100.0)
        if size == 100:
            clock.now += 3.0  # a slow answer: the next batch is due already
    assert starts == pytest.approx([0.0, 0.5, 1.0, 4.0])
    assert starts[:3] == pytest.approx(schedule([50, 50, 100], 100.0))
    assert clock.slept == pytest.approx([0.5, 0.5])


def test_without_a_rate_the_pacer_never_waits() -> None:
    clock = FakeClock()
    pacer = Pacer(None, clock, clock.sleep)
    for _ in range(3):
        pacer.wait(1000)
    assert clock.slept == []


def test_the_local_serve_is_the_default_target_with_its_key(tmp_path: Path) -> None:
    (tmp_path / RECORD_FILE).write_text(json.dumps({"api_url": "http://127.0.0.1:8123"}))
    (tmp_path / API_KEYS_FILE).write_text("# the local key\nlocal-key predict,learn,admin\n")
    target = api_target(None, None, tmp_path)
    assert (target.url, target.api_key) == ("http://127.0.0.1:8123", "local-key")
    assert "online-ctr status" in target.unreachable()
    given = tmp_path / "mine"
    given.write_text("my-key learn\n")
    assert api_target("http://h:1/", given, tmp_path) == ApiTarget("http://h:1", "my-key", "--url")
    given.write_text("# nothing\n")
    with pytest.raises(SystemExit, match="holds no key"):
        api_target("http://h:1", given, tmp_path)
    with pytest.raises(SystemExit, match="cannot read the API key file"):
        api_target("http://h:1", tmp_path / "absent", tmp_path)


def test_each_refusal_says_what_to_do() -> None:
    bare = ApiTarget("http://h:1", None, "--url")
    keyed = ApiTarget("http://h:1", "k", "--url")
    assert "(pass --api-key-file:" in service_error(ClientError(401, "no key"), bare)
    assert "another --api-key-file" in service_error(ClientError(401, "unknown key"), keyed)
    assert "learn scope" in service_error(ClientError(403, "needs learn"), keyed)
    conflict = ClientError(409, "Idempotency-Key 'feed-f-learn-0' was used ... other examples")
    assert "use its --batch-size" in service_error(conflict, keyed)
    assert "smaller --batch-size" in service_error(ClientError(413, "too large"), keyed)
    invalid = ClientError(422, "invalid body", (("examples", "at most 1000"),))
    assert service_error(invalid, keyed).endswith("422: invalid body; examples: at most 1000")
    assert service_error(UnreachableError("ConnectError"), bare).startswith(
        "no answer from the API at http://h:1 (--url): ConnectError"
    )


def test_the_summary_counts_what_the_service_did() -> None:
    done = Outcome(accepted=7, replayed=3, refused=Counter({"repeated": 2, "unlogged": 1}))
    assert summary(done, 10, 20, "http://h:1") == (
        "sent rows 10-19 to http://h:1: 7 accepted (3 of them by an earlier feed), "
        "2 repeated (labelled by an earlier feed), "
        "1 unlogged (not logged by /predict: OCTR_MAX_PENDING_IMPRESSIONS)"
    )
    assert summary(Outcome(), 50, 50, "u") == "sent no row to u (none from row 50 on)"


def test_a_bad_feed_id_is_refused_as_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["feed", "x", "--feed-id", "with space"])
    assert stopped.value.code == 2
    assert "--feed-id: must be 1-64 of" in capsys.readouterr().err


def test_the_example_click_log_is_the_example_feedback() -> None:
    """examples/clicks.csv (docs/concepts/replay.md feeds it) holds examples/feedback.json's
    visits as an Avazu CSV: the hour of day a category, as that format has it."""
    root = Path(__file__).resolve().parents[2] / "examples"
    sent = json.loads((root / "feedback.json").read_text())["examples"]
    expected = [({**e["features"], "hour": str(e["features"]["hour"])}, e["label"]) for e in sent]
    assert list(read_examples(root / "clicks.csv", "avazu")) == expected
