"""The load benchmarks' pieces: tool output parsers, statistics, bodies, the bare app, and
short real runs of each measurement against real processes.

No test asserts a timing: the real runs check what was counted (examples, requests, errors,
commands, bytes), never how fast.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtests.bench import bench_replay, drain, freshness, ingest, learning_runs, memory
from loadtests.common import bare_app, feed, stats, tools, wrk_runs
from loadtests.common.processes import Stack
from online_ctr.cli import api as api_command
from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.replay import replay
from online_ctr.learning.rules import get_rule
from service.api.predict_schemas import PREDICT_REQUEST

# loadtests/ is not an installed package; pytest's `pythonpath = ["."]` would make this moot.
from testkit.paths import DATA_DIR, ROOT

pytestmark = pytest.mark.processes


#: The output of a real 1-second run of wrk 4.1.0 with loadtests/common/wrk/post_bodies.lua.
WRK_OUTPUT = """\
Running 1s test @ http://127.0.0.1:52739/predict
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.73ms    2.05ms  19.79ms   89.57%
    Req/Sec     3.20k     2.04k    6.43k    70.00%
  3194 requests in 1.00s, 542.85KB read
Requests/sec:   3193.04
Transfer/sec:    542.69KB
WRK_SUMMARY {"requests": 3194, "duration_us": 1000301, "bytes": 555881, "connect_errors": 0, \
"read_errors": 0, "write_errors": 0, "status_errors": 2, "timeouts": 1, "latency_p50_us": 675, \
"latency_p90_us": 3864, "latency_p99_us": 9135, "latency_mean_us": 1733.9, \
"latency_max_us": 19792}
"""

needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None, reason="apt-get install -y wrk")


def test_parse_wrk_reads_the_summary_line_in_milliseconds() -> None:
    result = tools.parse_wrk(WRK_OUTPUT)
    assert (result.requests, result.errors) == (3194, 3)
    assert result.seconds == pytest.approx(1.000301)
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == (0.675, 3.864, 9.135)
    assert result.mean_ms == pytest.approx(1.7339) and result.max_ms == 19.792
    assert result.requests_per_second == pytest.approx(3194 / 1.000301)


def test_parse_wrk_refuses_output_without_the_summary() -> None:
    with pytest.raises(ValueError, match="WRK_SUMMARY"):
        tools.parse_wrk(WRK_OUTPUT.replace("WRK_SUMMARY", "SUMMARY"))


@needs_wrk
def test_wrk_command_passes_the_bodies_to_the_script() -> None:
    command = tools.wrk_command("http://127.0.0.1:1/p", Path("b.jsonl"), 32, 2.4)
    assert command[-3:] == ["http://127.0.0.1:1/p", "--", "b.jsonl"]
    assert "--connections=32" in command and "--duration=2s" in command
    assert f"--script={tools.WRK_SCRIPT}" in command and tools.WRK_SCRIPT.exists()


def test_require_names_the_debian_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(tools.MissingToolError, match="apt-get install -y redis-server"):
        tools.require("redis-server")


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 201)]  # 1..200
    assert stats.percentile(values, 50) == 100.0
    assert stats.percentile(values, 99) == 198.0
    assert stats.percentile(values, 100) == 200.0
    assert stats.percentile([3.0, 1.0, 2.0], 99) == 3.0  # few samples: p99 is the largest


@pytest.mark.parametrize(("values", "q"), [([], 50), ([1.0], 0), ([1.0], 101)])
def test_percentile_refuses_nonsense(values: list[float], q: float) -> None:
    with pytest.raises(ValueError):
        stats.percentile(values, q)


def test_parse_proc_stat_survives_spaces_and_parentheses_in_the_name() -> None:
    fields = " ".join(str(k) for k in range(4, 20))  # field k holds k, from field 4 on
    stat = stats.parse_proc_stat(f"77 (we (ird) name) S {fields}")
    assert stat.ticks == 14 + 15


def test_parse_proc_stat_reads_this_process() -> None:
    text = Path("/proc/self/stat").read_text()
    assert stats.parse_proc_stat(text).ticks == int(text.split()[13]) + int(text.split()[14])


def test_command_calls_and_deltas_from_commandstats() -> None:
    before = stats.command_calls({"cmdstat_hset": {"calls": 3, "usec": 9}, "other": {"x": 1}})
    after = stats.command_calls(
        {
            "cmdstat_hset": {"calls": 10, "usec": 30},
            "cmdstat_evalsha": {"calls": 2, "usec": 50},
            "cmdstat_info": {"calls": 4, "usec": 1},
        }
    )
    assert before == {"hset": 3}
    assert stats.calls_delta(before, after, minus={"info": 4}) == {"evalsha": 2, "hset": 7}
    assert stats.calls_delta(before, after, minus={"hset": 1}) == {
        "evalsha": 2,
        "hset": 6,
        "info": 4,
    }
    with pytest.raises(ValueError, match="info"):
        stats.calls_delta(before, after, minus={"info": 5})


def test_single_bodies_are_one_valid_request_per_row(tmp_path: Path) -> None:
    rows = feed.criteo_rows(DATA_DIR, limit=25)
    lines = wrk_runs.write_bodies(tmp_path / "b", rows, 1).read_text().splitlines()
    assert len(lines) == 25
    for line, (example, _) in zip(lines, rows, strict=True):
        assert PREDICT_REQUEST.validate_json(line).rows() == [example]


def test_batch_bodies_hold_consecutive_rows_and_drop_a_partial_one(tmp_path: Path) -> None:
    rows = feed.criteo_rows(DATA_DIR, limit=25)
    lines = wrk_runs.write_bodies(tmp_path / "b", rows, 10).read_text().splitlines()
    assert [PREDICT_REQUEST.validate_json(line).rows() for line in lines] == [
        [x for x, _ in rows[:10]],
        [x for x, _ in rows[10:20]],
    ]


async def _bare_answers() -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=bare_app.create_bare_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://bare") as client:
        return [
            await client.post("/predict", json={"features": {"site": "news", "hour": 3.0}}),
            await client.post("/predict", json={"examples": [{"features": {"site": "a"}}]}),
            await client.post("/predict", json={"features": {"a": "b"}, "examples": []}),
            await client.post("/predict", json={"features": {"a": True}}),
            await client.post("/noop", content=b"not even json"),
        ]


def test_bare_app_parses_the_predict_body_and_answers_a_constant() -> None:
    single, batch, both, wrong, noop = asyncio.run(_bare_answers())
    assert single.json() == batch.json() == bare_app.CONSTANT.model_dump()
    assert (both.status_code, wrong.status_code, noop.status_code) == (422, 422, 200)


def _uvicorn_keywords(function: object) -> dict[str, str]:
    """The keywords of the ``uvicorn.run`` call in a function's source, as source text."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))  # type: ignore[arg-type]
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "uvicorn.run"
    ]
    assert len(calls) == 1
    return {str(k.arg): ast.unparse(k.value) for k in calls[0].keywords}


def test_bare_app_is_served_with_the_same_uvicorn_settings_as_the_api() -> None:
    assert _uvicorn_keywords(bare_app.serve) == _uvicorn_keywords(api_command.api)


def test_entries_are_what_the_api_writes_for_a_single_example() -> None:
    from online_ctr.store.codec import decode_entry

    rows = feed.criteo_rows(DATA_DIR, limit=3)
    decoded = [decode_entry(blob) for blob in feed.entries(rows)]
    assert [len(batch) for batch in decoded] == [1, 1, 1]
    assert [batch.labels.tolist() for batch in decoded] == [[y] for _, y in rows]


# Short real runs: real Redis, real API and worker processes, real tools.


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with Stack(tmp_path) as running:
        yield running


def test_learn_bodies_hold_consecutive_labelled_rows(tmp_path: Path) -> None:
    from pydantic import TypeAdapter

    from service.api.learn_schemas import LearnRequest

    rows = feed.criteo_rows(DATA_DIR, limit=25)
    lines = wrk_runs.write_learn_bodies(tmp_path / "b", rows, 10).read_text().splitlines()
    assert len(lines) == 2  # the partial 5 dropped
    body = TypeAdapter(LearnRequest).validate_json(lines[1])
    assert (body.rows(), body.labels()) == (
        [x for x, _ in rows[10:20]],
        [y for _, y in rows[10:20]],
    )


def test_entries_of_many_examples_keep_the_rows_in_order() -> None:
    from online_ctr.store.codec import decode_entry

    rows = feed.criteo_rows(DATA_DIR, limit=25)
    blobs = feed.entries(rows, per_entry=10)
    assert [len(decode_entry(blob)) for blob in blobs] == [10, 10]  # the partial 5 dropped
    assert decode_entry(blobs[1]).labels.tolist() == [y for _, y in rows[10:20]]


@pytest.mark.parametrize("per_entry", [1, 64])
def test_one_learner_drains_every_fed_example_and_its_redis_calls_are_counted(
    stack: Stack, per_entry: int
) -> None:
    rows = feed.criteo_rows(DATA_DIR, limit=500)
    run = drain.run_learner(stack, rows, 1280, per_entry)
    assert (run.per_entry, run.examples) == (per_entry, 1280)
    with stack.client() as client:
        assert feed.global_step(client) == 1280 and client.xlen(feed.MODEL.stream) == 0
    assert run.calls.get("evalsha", 0) >= 1  # at least one commit
    assert "info" not in run.calls  # our one INFO in the window is subtracted
    assert run.logloss is not None and 0 < run.logloss < 1
    assert stack.workers() == []
    with pytest.raises(ValueError, match="do not fill"):
        drain.run_learner(stack, rows, 1281, 64)


@needs_wrk
def test_wrk_with_the_lua_script_counts_requests_and_no_errors(
    stack: Stack, tmp_path: Path
) -> None:
    bare = stack.start_bare()
    bodies = wrk_runs.write_bodies(tmp_path / "bodies", feed.criteo_rows(DATA_DIR, limit=50), 1)
    how = wrk_runs.Load(bodies, 1, 4, 1.0)
    run = wrk_runs.load("bare", f"{bare}/predict", how, {"bare": stack.children["bare"].pid})
    assert run.wrk.requests > 0 and run.wrk.errors == 0
    assert 0 < run.wrk.p50_ms <= run.wrk.p99_ms <= run.wrk.max_ms
    assert set(run.cores) == {"bare", "wrk"}


@needs_wrk
def test_wrk_failures_are_not_counted_as_throughput(stack: Stack, tmp_path: Path) -> None:
    bare = stack.start_bare()
    bodies = tmp_path / "bodies"
    bodies.write_text(json.dumps({"features": {}}) + "\n")  # a 422 for every request
    with pytest.raises(RuntimeError, match="failed requests"):
        wrk_runs.load("bare", f"{bare}/predict", wrk_runs.Load(bodies, 1, 2, 1.0), {})


@needs_wrk
def test_ingest_counts_what_reached_the_stream(stack: Stack, tmp_path: Path) -> None:
    rows = feed.criteo_rows(DATA_DIR, limit=3000)
    with stack.client() as client:  # a worker creates the model, then stops
        feed.feed(client, feed.entries(rows[:10]), 10)
        stack.start_workers(1)
        feed.wait_for_step(client, 10, 120, stack.check_alive)
        stack.stop(*stack.workers())
        api = stack.start_api()
        result = ingest.measure(api, tmp_path, rows, 1.0, {"api": stack.children["api"].pid})
        entries = client.xlen(feed.MODEL.stream)
    assert result.in_stream_examples == entries * ingest.BODY_EXAMPLES > 0
    assert 0 < result.accepted_examples == result.run.wrk.requests * ingest.BODY_EXAMPLES
    assert result.accepted_examples <= result.in_stream_examples
    assert result.run.label == "`/learn` (online-ctr api, no worker), batch of 1,000"


def test_freshness_samples_are_all_reflected(stack: Stack) -> None:
    api = stack.start_api()
    stack.start_workers(1)
    rows = feed.criteo_rows(DATA_DIR, limit=200)
    result = asyncio.run(freshness.sample_under_load(api, rows, samples=3, budget_s=60))
    assert (len(result.seconds), result.missed) == (3, 0)
    assert len(result.poll_seconds) >= 3 and result.load_examples_per_second > 0


def test_memory_counts_at_least_the_payload_of_every_tracked_feature(tmp_path: Path) -> None:
    rows = feed.criteo_rows(DATA_DIR, limit=300)
    result = memory.measure_one(tmp_path, rows, buckets=64)
    assert result.examples == 300 and result.tracked > 300
    assert result.bucket_bytes_per_feature >= memory.PAYLOAD_BYTES
    assert result.bytes_per_feature >= memory.PAYLOAD_BYTES
    assert sum(result.encodings.values()) == 64


def test_locustfile_runs_headless_against_the_real_service(stack: Stack, tmp_path: Path) -> None:
    api = stack.start_api()
    stack.start_workers(1)
    csv = tmp_path / "locust"
    locust = Path(sys.executable).with_name("locust")
    command = [
        str(locust), "-f", str(ROOT / "loadtests" / "bench" / "locustfile.py"), "--headless",
        "-u", "2", "-r", "2", "-t", "5s", "--host", api, "--csv", str(csv),
        "--feedback-delay-s", "0.5", "--page-share", "0.3",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    stats_rows = {row["Name"]: row for row in csv_rows(tmp_path / "locust_stats.csv")}
    assert int(stats_rows["/predict"]["Request Count"]) > 0
    assert int(stats_rows["/learn"]["Request Count"]) > 0
    assert stats_rows["Aggregated"]["Failure Count"] == "0"
    with stack.client() as client:  # the feedback reached the stream
        assert feed.global_step(client) + client.xlen(feed.MODEL.stream) > 0


def csv_rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as stream:
        return list(csv.DictReader(stream))


@pytest.mark.parametrize("module", [stats, feed], ids=lambda m: m.__name__)
def test_docstring_examples(module: object) -> None:
    import doctest

    failed, attempted = doctest.testmod(module, report=False)  # type: ignore[arg-type]
    assert (failed, attempted > 0) == (0, True)


def test_write_rows_repeats_the_file_s_lines_in_order(tmp_path: Path) -> None:
    source = tmp_path / "five.tsv"
    source.write_bytes(b"a\nb\nc\nd\ne")  # no newline at the end
    written = learning_runs.write_rows(source, tmp_path / "twelve.tsv", 12)
    assert written.read_text().splitlines() == list("abcdeabcdeab")


def test_the_replay_process_learns_the_repeated_rows_like_the_replay_in_process(
    tmp_path: Path,
) -> None:
    head = tmp_path / "head.tsv"  # the file's first 300 rows, repeated to 700
    head.write_bytes(b"".join((DATA_DIR / feed.CRITEO).read_bytes().splitlines(True)[:300]))
    path = learning_runs.write_rows(head, tmp_path / "rows.tsv", 700)
    run = learning_runs.run_replay(path, 700)
    repeated = bench_replay.replicate(feed.criteo_rows(DATA_DIR, limit=300), 700)
    # The command's model: the default, with its base-rate prior (run_ours drops it).
    in_process = replay(repeated, InMemoryModel(get_rule("ftrl")), FeatureHasher(), 100)
    assert run.log_loss == pytest.approx(in_process.logloss, rel=1e-12)
    with pytest.raises(RuntimeError, match="learned 700 examples, expected 10"):
        learning_runs.run_replay(path, 10)
