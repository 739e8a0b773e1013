"""``online-ctr feed`` against the real API and worker: every row learned exactly once, in the
file's order (the served model equals the in-process replay of the same rows), however often
the feed is interrupted and run again; by ``/learn`` or by ``/predict`` then labels by id."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from online_ctr.cli.embedded import RedisServer
from online_ctr.cli.main import main
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule
from testkit.paths import CRITEO
from testkit.ports import free_port
from tests.integration.conftest import Service, wait_until

LEARN_KEY = "feed-learn-and-predict-key-0000"
PREDICT_KEY = "feed-predict-only-key-000000000"
ADMIN_KEY = "feed-admin-key-for-the-tests-00"
KEYS = {
    LEARN_KEY: ["predict", "learn"],
    PREDICT_KEY: ["predict"],
    ADMIN_KEY: ["predict", "learn", "admin"],
}
ROWS = 2_000


@pytest.fixture
def feed_service(
    redis_url: str, start_service: Callable[..., Service], tmp_path: Path
) -> Callable[..., tuple[Service, Path]]:
    """The service with keys on (``settings`` added), and a key file of the learn key."""
    key_file = tmp_path / "key"
    key_file.write_text(f"{LEARN_KEY} predict,learn  # the feed's\n")

    def start(redis: str | None = None, **settings: str) -> tuple[Service, Path]:
        keys = json.dumps(KEYS)
        url = redis or redis_url
        service = start_service(url, OCTR_AUTH="on", OCTR_API_KEYS=keys, **settings)
        return service, key_file

    return start


def info(service: Service) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    reply = httpx.get(f"{service.api_url}/models/default", headers=headers, timeout=5)
    reply.raise_for_status()
    body: dict[str, Any] = reply.json()
    return body


def feed_args(service: Service, key_file: Path, *more: str) -> list[str]:
    url = ["--url", service.api_url, "--api-key-file", str(key_file)]
    return ["feed", str(CRITEO), *url, "--batch-size", "300", *more]


def assert_learned_as_replay(service: Service, rows: int, joined: bool = False) -> None:
    """The service learned the file's first ``rows`` once each, in order: as the replay did.
    (The log loss of ``joined`` examples is that of the probabilities served, docs/concepts/
    joins.md, not the learner's.)"""
    wait_until(lambda: info(service)["global_step"] >= rows, what=f"{rows} learned")
    served = info(service)
    assert served["global_step"] == rows and served["stream_lag"] == 0
    examples = list(itertools.islice(read_examples(CRITEO, "criteo"), rows))
    rule = get_rule("ftrl")
    replayed = InMemoryModel(rule, rule.params())
    result = replay(examples, replayed, FeatureHasher(), batch_size=1)
    assert served["nonzero_weights"] == result.nonzero_weights
    assert served["features_tracked"] == result.features_tracked
    # Redis sums the log losses in its own order (see tests/workers/test_worker_matches_replay).
    if not joined:
        assert served["progressive_logloss"] == pytest.approx(result.logloss, rel=1e-12)
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    body = {"examples": [{"features": x} for x, _ in examples[:20]]}
    answer = httpx.post(f"{service.api_url}/predict", json=body, headers=headers).json()
    hashed = FeatureHasher().batch([x for x, _ in examples[:20]])
    assert [p["probability"] for p in answer["predictions"]] == list(replayed.predict(hashed))


def test_a_feed_learns_every_row_once_and_a_rerun_learns_nothing(
    feed_service: Callable[..., tuple[Service, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    service, key_file = feed_service()
    # The first three batches (an interrupted feed), then the whole: the first three again.
    assert main(feed_args(service, key_file, "--limit", "900")) == 0
    assert "rows 0-899" in capsys.readouterr().out
    assert main(feed_args(service, key_file, "--limit", str(ROWS))) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    url = service.api_url
    assert out == f"sent rows 0-1999 to {url}: 2,000 accepted (900 of them by an earlier feed)"
    assert_learned_as_replay(service, ROWS)

    assert main(feed_args(service, key_file, "--limit", str(ROWS))) == 0
    assert "(2,000 of them by an earlier feed)" in capsys.readouterr().out
    again = info(service)  # nothing appended: no lag, no step more
    assert again["global_step"] == ROWS and again["stream_lag"] == 0


def feed_slowly(service: Service, args: list[str]) -> subprocess.Popen[str]:
    """``online-ctr feed`` at 300 rows a second (2,000 rows: over six seconds to go), once
    its first batch is learned."""
    command = [sys.executable, "-m", "online_ctr.cli.main", *args, "--rate", "300"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: info(service)["global_step"] >= 300, what="a batch learned")
    return process


def test_a_feed_killed_midway_resumes_from_the_row_it_names(
    feed_service: Callable[..., tuple[Service, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    service, key_file = feed_service()
    args = feed_args(service, key_file, "--limit", str(ROWS))
    process = feed_slowly(service, args)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    start = re.search(r"resume with --start (\d+)", err)
    assert start is not None, err
    assert int(start[1]) % 300 == 0 and 300 <= int(start[1]) < ROWS
    assert main([*args, "--start", start[1]]) == 0
    assert f"sent rows {start[1]}-1999" in capsys.readouterr().out
    assert_learned_as_replay(service, ROWS)


def test_a_killed_feed_run_again_learns_each_row_once(
    feed_service: Callable[..., tuple[Service, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    service, key_file = feed_service()
    args = feed_args(service, key_file, "--limit", str(ROWS))
    process = feed_slowly(service, args)
    process.kill()  # no chance to say where it was: maybe in the middle of a request
    process.communicate(timeout=30)
    assert main(args) == 0
    assert "of them by an earlier feed" in capsys.readouterr().out
    assert_learned_as_replay(service, ROWS)


def test_a_feed_rides_out_a_redis_restart_and_learns_each_row_once(
    feed_service: Callable[..., tuple[Service, Path]], make_redis_server: Callable[..., Any]
) -> None:
    redis: RedisServer = make_redis_server(persist=True)
    service, key_file = feed_service(redis.url)
    process = feed_slowly(service, feed_args(service, key_file, "--limit", str(ROWS)))
    redis.stop()
    # The feed's next batch gets a 503 (Redis unavailable, Retry-After 1), and waits.
    wait_until(lambda: learn_5xx(service) > 0, what="a 503 to the feed", logs=service.logs)
    redis.start()
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out == "sent rows 0-1999 to " + service.api_url + ": 2,000 accepted\n"
    assert_learned_as_replay(service, ROWS)


def learn_5xx(service: Service) -> float:
    """How many /learn requests the API answered with a 5xx."""
    text = httpx.get(f"{service.api_url}/metrics", timeout=5).text
    wanted = {"route": "/learn", "status_class": "5xx"}
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "online_ctr_http_requests_total"
        and wanted.items() <= sample.labels.items()
    )


def test_a_join_feed_predicts_then_labels_each_row_by_its_id(
    feed_service: Callable[..., tuple[Service, Path]], capsys: pytest.CaptureFixture[str]
) -> None:
    service, key_file = feed_service(OCTR_JOIN_WINDOW_S="600")
    args = feed_args(service, key_file, "--limit", "1000", "--join")
    assert main(args) == 0
    assert "sent rows 0-999" in capsys.readouterr().out
    assert_learned_as_replay(service, 1000, joined=True)
    # Run again: its /predict finds the ids used, its labels are answered as before.
    assert main(args) == 0
    assert "(1,000 of them by an earlier feed)" in capsys.readouterr().out
    assert info(service)["global_step"] == 1000 and info(service)["stream_lag"] == 0


def test_a_join_feed_run_again_after_its_ids_are_forgotten_says_so(
    feed_service: Callable[..., tuple[Service, Path]],
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service, key_file = feed_service(OCTR_JOIN_WINDOW_S="1")
    args = feed_args(service, key_file, "--limit", "300", "--join")
    assert main(args) == 0
    capsys.readouterr()
    redis = Redis.from_url(redis_url)
    try:  # the impressions' tombstones go a window after their labels
        assert list(redis.scan_iter(match="*:imp:feed-*")), "no tombstone to wait for"
        wait_until(lambda: not list(redis.scan_iter(match="*:imp:feed-*")), what="forgotten")
    finally:
        redis.close()
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "300 accepted (300 of them by an earlier feed), 300 relogged (" in out


def test_the_progress_bar_shows_on_a_terminal_only(
    feed_service: Callable[..., tuple[Service, Path]], tmp_path: Path
) -> None:
    service, key_file = feed_service()
    # The example click log: an Avazu CSV, whose header the bar does not count as a row.
    clicks = Path(__file__).resolve().parents[2] / "examples" / "clicks.csv"
    url = ["--url", service.api_url, "--api-key-file", str(key_file)]
    args = [sys.executable, "-m", "online_ctr.cli.main", "feed", str(clicks), *url]
    piped = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr
    main_fd, terminal = pty.openpty()
    # 24 rows of 80 columns, as a terminal window has (a new pty has none: tqdm draws nothing).
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        shown = subprocess.run(args, stdout=subprocess.PIPE, stderr=terminal, timeout=60)
        os.close(terminal)
        drawn = read_all(main_fd)
    finally:
        os.close(main_fd)
    assert shown.returncode == 0
    assert "1000/1000" in drawn and "rows" in drawn, drawn


def read_all(descriptor: int) -> str:
    """What a terminal's other end was sent, to its end (EIO once every writer closed it)."""
    chunks = []
    while True:
        try:
            chunk = os.read(descriptor, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def test_bad_inputs_get_one_clear_line(
    feed_service: Callable[..., tuple[Service, Path]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service, key_file = feed_service()
    unknown, predict_only = tmp_path / "unknown", tmp_path / "predict-only"
    unknown.write_text("nobody-has-this-key-0000000000\n")
    predict_only.write_text(f"{PREDICT_KEY}\n")

    def error(*args: str) -> str:
        assert main(["feed", *args]) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("online-ctr feed: error: "), lines
        return lines[0]

    url = ["--url", service.api_url]
    assert "no such file: /nonexistent.tsv" in error("/nonexistent.tsv", *url)
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("hello world\n")
    assert "garbage.txt" in error(str(garbage), *url)
    assert "answered 401" in error(str(CRITEO), *url)
    assert "--api-key-file" in error(str(CRITEO), *url)
    assert "another --api-key-file" in error(str(CRITEO), *url, "--api-key-file", str(unknown))
    no_scope = error(str(CRITEO), *url, "--api-key-file", str(predict_only))
    assert "answered 403" in no_scope and "learn scope" in no_scope
    keyed = [*url, "--api-key-file", str(key_file)]
    too_many = error(str(CRITEO), *keyed, "--batch-size", "1001")
    assert "answered 422" in too_many and "1000" in too_many
    assert "answered 404" in error(str(CRITEO), *keyed, "--model", "nosuch")
    # --join on a model without joins: the service says how to turn them on.
    assert "OCTR_JOIN_WINDOW_S" in error(str(CRITEO), *keyed, "--join")
    stopped = f"http://127.0.0.1:{free_port()}"
    assert f"no answer from the API at {stopped}" in error(str(CRITEO), "--url", stopped)
    # No --url, and no serve recorded in the data directory: a StartupError's one line.
    with pytest.raises(SystemExit, match="no API to send to: pass --url"):
        main(["feed", str(CRITEO), "--data-dir", str(tmp_path / "empty")])
