"""The VW daemon benchmark's parts: what both systems are sent (VW's lines are ``_vw.py``'s),
the raw socket client's reading of answers, the A B B A arithmetic and the report; and the
whole command briefly against the real daemon and the real ``online-ctr serve``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from loadtests.bench import _vw, vw_daemon
from loadtests.bench import run as bench
from loadtests.bench.vw_daemon_parts import (
    Answers,
    Run,
    against_bare,
    compare,
    cpu_breakdown,
    http_request,
    learn_bodies,
    learning_payload,
    order,
    per_round,
    predict_bodies,
    prediction_lines,
    tree_ticks,
)
from loadtests.bench.vw_daemon_report import (
    About,
    bare_table,
    comparison_table,
    cpu_table,
    page,
)
from loadtests.bench.vw_daemon_systems import tree_cpu_seconds
from loadtests.common import feed
from loadtests.common.report import BenchOptions
from loadtests.common.stats import cpu_seconds
from testkit.paths import DATA_DIR


@pytest.fixture(scope="module")
def rows() -> list[feed.Row]:
    return feed.criteo_rows(DATA_DIR, limit=300)


def test_vw_lines_are_the_text_encoders(rows: list[feed.Row]) -> None:
    lines = _vw.TextEncoder().lines(rows)
    assert learning_payload(rows).decode().splitlines() == lines
    unlabelled = [line.decode() for line in prediction_lines(rows)]
    for line, bare in zip(lines, unlabelled, strict=True):
        label, _, features = line.partition(" | ")
        assert label in ("1", "-1") and bare == f"| {features}\n"
    # The features are ours by name: `I{j}=bucket` and `C{j}=value`, the bias VW's constant.
    tokens = lines[0].split(" | ")[1].split()
    assert tokens == [f"{name}={value}" for name, value in rows[0][0].items()]
    assert {token.split("=")[0][0] for token in tokens} == {"I", "C"}


def test_bodies_hold_the_rows_in_order(rows: list[feed.Row]) -> None:
    learn = learn_bodies(rows, 100)
    assert len(learn) == 3
    sent = [example for body in learn for example in orjson.loads(body)["examples"]]
    assert sent == [{"features": x, "label": y} for x, y in rows]
    assert len(learn_bodies(rows[:250], 100)) == 2  # a partial last body is dropped
    single = predict_bodies(rows, 1)
    assert [orjson.loads(body) for body in single] == [{"features": x} for x, _ in rows]
    [batch] = predict_bodies(rows[:150], 100)
    assert orjson.loads(batch)["examples"] == [{"features": x} for x, _ in rows[:100]]


def test_an_http_request_is_one_framed_post() -> None:
    request = http_request("/learn", b'{"a":1}', "secret")
    head, _, body = request.partition(b"\r\n\r\n")
    assert body == b'{"a":1}'
    assert head.split(b"\r\n")[0] == b"POST /learn HTTP/1.1"
    assert b"Authorization: Bearer secret" in head and b"Content-Length: 7" in head


AnswersFrom = Callable[..., Answers]


@pytest.fixture
def answers_from() -> Iterator[AnswersFrom]:
    """Makes an :class:`Answers` over a socket pair whose other end sends some pieces one by
    one (then closes, if told); every socket closed at the end."""
    opened: list[socket.socket] = []
    senders: list[threading.Thread] = []

    def make(*pieces: bytes, close: bool = False) -> Answers:
        ours, theirs = socket.socketpair()
        opened.extend((ours, theirs))

        def send() -> None:
            for piece in pieces:
                theirs.sendall(piece)
            if close:
                theirs.close()

        senders.append(threading.Thread(target=send))
        senders[-1].start()
        return Answers(ours)

    yield make
    for sender in senders:
        sender.join()
    for end in opened:
        end.close()


def test_answers_split_http_responses_sent_in_pieces(answers_from: AnswersFrom) -> None:
    first = b'HTTP/1.1 202 Accepted\r\ncontent-length: 14\r\n\r\n{"accepted":1}'
    second = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    stream = first + second
    answers = answers_from(stream[:10], stream[10:50], stream[50:])
    assert answers.response() == (202, b'{"accepted":1}')
    assert answers.response() == (200, b"{}")


def test_answers_refuse_an_unframed_or_cut_response(answers_from: AnswersFrom) -> None:
    with pytest.raises(ValueError, match="without Content-Length"):
        answers_from(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n").response()
    with pytest.raises(ConnectionError):
        answers_from(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}", close=True).response()


def test_answers_count_lines_across_reads_and_keep_the_rest(answers_from: AnswersFrom) -> None:
    answers = answers_from(b"0\n0.5", b"\n-1\n", b"2\n")
    assert answers.lines(2) == b"0\n0.5\n"
    assert answers.lines(1) == b"-1\n"
    assert answers.lines(1) == b"2\n"
    with pytest.raises(ConnectionError, match="0 of 1"):
        answers_from(close=True).lines(1)


def test_a_process_trees_cpu_counts_the_children_it_waited_for() -> None:
    # As Redis's append-only-file rewrite: a fork that works, ends and is waited for.
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    me = os.getpid()
    before, own_before = tree_cpu_seconds(me), cpu_seconds(me)
    subprocess.run([sys.executable, "-c", burn], check=True)
    children_s = tree_cpu_seconds(me) - before - (cpu_seconds(me) - own_before)
    assert children_s >= 0.29
    assert tree_ticks("1 (a) b) S " + "0 " * 10 + "1 2 3 4 5") == 10  # ")" in the name


def _run(
    system: str, learn_s: float, single_ms: float, cpu: float = 1.0, bare_ms: float = 0.5
) -> Run:
    """A run; ours with its bare endpoint's single predictions (``bare_ms`` each)."""
    single = tuple(single_ms / 1e3 for _ in range(10))
    bare = tuple(bare_ms / 1e3 for _ in range(20)) if system == "ours" else ()
    figures = (single, sum(single), (0.02, 0.03), 1000, 0.45, {"p": cpu})
    return Run(system, 1000, learn_s, *figures, bare_single_s=bare)


def test_rounds_are_a_b_b_a_and_the_ratio_is_taken_per_round() -> None:
    assert order(1) == ["vw", "ours", "ours", "vw"]
    # Round 1: VW 1 s and 3 s (mean 2), ours 4 s twice; round 2: VW 1 s, ours 1 s.
    times = [1.0, 4.0, 4.0, 3.0, 1.0, 1.0, 1.0, 1.0]
    runs = [_run(system, t, 1.0) for system, t in zip(order(2), times, strict=True)]
    assert per_round(runs, "learn_s") == [{"vw": 2.0, "ours": 4.0}, {"vw": 1.0, "ours": 1.0}]
    learning = compare(runs)[0]
    # examples/s: round 1 VW mean(1000, 333.3), ours 250; round 2 both 1000.
    assert learning.ratios == pytest.approx((250 / ((1000 + 1000 / 3) / 2), 1.0))
    assert learning.ratio == pytest.approx((learning.ratios[0] + 1.0) / 2)  # median of two
    assert learning.vw == pytest.approx(((1000 + 1000 / 3) / 2 + 1000) / 2)
    with pytest.raises(ValueError, match="A B B A"):
        per_round(runs[1:5], "learn_s")


def test_every_figure_is_compared_with_its_direction() -> None:
    runs = [_run(s, 1.0, ms) for s, ms in zip(order(1), [0.1, 1.0, 1.0, 0.1], strict=True)]
    by_label = {c.label: c for c in compare(runs)}
    p50 = by_label["one prediction at a time, p50 ms"]
    assert (p50.better, p50.vw, p50.ours) == ("lower", 0.1, 1.0)
    assert p50.ratio == pytest.approx(10)
    rate = by_label["one prediction at a time, requests/s (the whole loop)"]
    assert rate.better == "higher" and rate.ratio == pytest.approx(0.1)
    batch = by_label["batch of 1,000 predictions, examples/s (all batches)"]
    assert batch.ours == pytest.approx(2000 / 0.05)


def test_ours_is_compared_with_the_bare_endpoint_of_its_own_runs() -> None:
    # Round 1: ours 1 ms and 3 ms (mean 2), its bare blocks 0.5 ms and 1.5 ms (mean 1);
    # round 2: ours 1 ms, bare 1 ms. The VW runs play no part.
    singles = [9.0, 1.0, 3.0, 9.0, 9.0, 1.0, 1.0, 9.0]
    bares = [9.0, 0.5, 1.5, 9.0, 9.0, 1.0, 1.0, 9.0]
    runs = [_run(s, 1.0, ms, bare_ms=b) for s, ms, b in zip(order(2), singles, bares, strict=True)]
    p50, p99 = against_bare(runs)
    assert p50.ratios == pytest.approx((2.0, 1.0)) and p50.ratio == pytest.approx(1.5)
    assert (p50.vw, p50.ours) == (pytest.approx(1.0), pytest.approx(1.5))
    assert p99.label == "one prediction at a time, p99 ms"
    table = bare_table(runs)
    assert (
        "| one prediction at a time, p50 ms | 1.00 | 1.50 | 1.50x | 2.00x, 1.00x | <= 1.5x |"
        in table
    )
    assert "| <= 2x |" in table


def test_the_cpu_breakdown_and_the_page() -> None:
    runs = [_run(s, 2.0, 1.0, cpu) for s, cpu in zip(order(1), [1.0, 2.0, 4.0, 3.0], strict=True)]
    assert cpu_breakdown(runs, "vw") == {"p": 2.0} and cpu_breakdown(runs, "ours") == {"p": 3.0}
    assert "| online-ctr serve | p | 3.00 | 3,000 | 1.50 |" in cpu_table(runs)
    assert "| one prediction at a time, p50 ms | lower | 1.00 | 1.00 | 1.00x | 1.00x |" in (
        comparison_table(runs)
    )
    about = About("python -m loadtests.bench.vw_daemon", "today", 1, (0.5, 1.5), 2.0, "a machine")
    text = page(runs, about)
    assert text.startswith("# Against Vowpal Wabbit's daemon\n")
    assert "`make bench-vw-daemon` (`python -m loadtests.bench.vw_daemon`)" in text
    assert "0.50 at the start and 1.50 at the end" in text


def test_the_bench_section_judges_learning_against_the_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    times = [1.0, 2.0, 2.0, 1.0]  # ours learns at half VW's speed
    runs = [_run(s, t, 1.0) for s, t in zip(order(1), times, strict=True)]
    monkeypatch.setattr(vw_daemon, "load", lambda *args: None)
    monkeypatch.setattr(vw_daemon, "measure", lambda work, rounds: runs)
    section = vw_daemon.run(BenchOptions(True, 1000, tmp_path, tmp_path))
    learning, single, bare_p50, bare_p99 = section.headlines
    assert (learning.value, learning.baseline_value) == (500.0, 1000.0)
    assert learning.target is not None and not learning.target.met(500.0, 1000.0)
    assert single.unit == "ms" and single.target is None
    # Ours 1 ms against the bare endpoint's 0.5 ms: 2x, past the p50's 1.5x, at the p99's 2x.
    assert (bare_p50.value, bare_p50.baseline_value) == (1.0, 0.5)
    assert bare_p50.target is not None and not bare_p50.target.met(1.0, 0.5)
    assert bare_p99.target is not None and bare_p99.target.met(1.0, 0.5)
    assert "vw_daemon" in bench.SECTIONS


@pytest.mark.processes
def test_the_command_runs_both_systems_for_real(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "page.md"
    argv = ["--rows", "2000", "--rounds", "1", "--single", "30", "--batches", "2"]
    assert vw_daemon.main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| learning, examples/s until all are learned | higher |" in printed
    assert "| one prediction at a time, p50 ms |" in printed.split("| ours/bare |")[1]
    for process in ("VW daemon", "Redis", "API", "worker", "load generator"):
        assert f" | {process} | " in printed
    assert "Learning the 2,000 rows (medians)" in out.read_text()
