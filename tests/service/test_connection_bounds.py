"""The bounds of an HTTP connection (issue 33, :mod:`service.connections`) on a real
``online-ctr api`` with API keys, driven through raw sockets: the size of a request's head, the
time it may take, idle connections, and how many may be open; and the open-file limit the API
refuses to start under. Deadlines here are generous: they check behaviour, not speed."""

from __future__ import annotations

import json
import os
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.startup import FD_RESERVE
from service.app import create_app
from service.connections import bounded_protocol
from testkit.ports import free_port
from tests.service.keys import AUTH, LEARN_KEY, PREDICT_KEY
from tests.service.test_commands import ROOT, assert_one_line

pytestmark = pytest.mark.processes

#: A header line of 64 KiB, as the flood that grew the API by gigabytes sent.
LINE = b"X-Fill: " + b"a" * 65_536 + b"\r\n"
#: What the flood test sends at most before it gives up waiting for an answer.
FLOOD_CAP_BYTES = 256 << 20
#: How far the API's resident memory may grow under that flood (unbounded, it grew by 4 GB in 15 s).
RSS_GROWTH_BOUND_KIB = 64 << 10
PREDICT = {"features": {"site": "news", "ad": "a1"}}
#: Long enough never to end during a test that does not wait for it.
NEVER = "600"


@dataclass
class Api:
    """A running ``online-ctr api``."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=30)

    def predict(self, key: str = PREDICT_KEY) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.post(f"{self.url}/predict", json=PREDICT, headers=headers, timeout=30)

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=30).text

    def refusals(self) -> dict[str, float]:
        """``online_ctr_http_refusals_total`` by reason."""
        pattern = r'^online_ctr_http_refusals_total\{reason="(\w+)"\} (\S+)$'
        return {m[1]: float(m[2]) for m in re.finditer(pattern, self.metrics(), re.MULTILINE)}

    def connections(self) -> float:
        """``online_ctr_http_connections``: this scrape's own connection included."""
        found = re.search(r"^online_ctr_http_connections (\S+)$", self.metrics(), re.MULTILINE)
        assert found is not None
        return float(found[1])


def environment(redis_url: str, port: int, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    env.update(
        PYTHONPATH=str(ROOT),
        OCTR_REDIS_URL=redis_url,
        OCTR_PORT=str(port),
        OCTR_API_KEYS=AUTH["api_keys"].get_secret_value(),
        **settings,
    )
    return env


def launch(
    redis_url: str, port: int, log: Path | None, fd_limit: tuple[int, int] | None, **settings: str
) -> subprocess.Popen[bytes]:
    """``online-ctr api`` on ``port``, its stderr in ``log`` (None: a pipe), under the
    open-file limit ``fd_limit`` (soft, hard; None: this process's)."""

    def limit() -> None:
        if fd_limit is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, fd_limit)

    with open(log or os.devnull, "wb") as out:  # the child keeps its copy
        return subprocess.Popen(
            [sys.executable, "-m", "online_ctr.cli.main", "api"],
            env=environment(redis_url, port, **settings),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if log is None else out,
            preexec_fn=limit,
        )


@pytest.fixture
def start_api(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Api]]:
    """Start ``online-ctr api`` with ``OCTR_*`` settings; each stopped after the test."""
    started: list[Api] = []

    def start(fd_limit: tuple[int, int] | None = None, **settings: str) -> Api:
        port = free_port()
        log = tmp_path / f"api-{port}.log"
        api = Api(launch(redis_url, port, log, fd_limit, **settings), port, log)
        started.append(api)
        until(lambda: healthy(api), "the API to start")
        return api

    yield start
    for api in started:
        api.process.terminate()
        api.process.wait(15)


def healthy(api: Api) -> bool:
    assert api.process.poll() is None, f"the API exited: {api.log.read_text()}"
    return httpx.get(f"{api.url}/healthz").status_code == 200


def until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll ``check`` until true (a connection error is a no); fail naming ``what`` after a
    generous deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    answer = b""
    while chunk := sock.recv(65_536):
        answer += chunk
    return answer


def read_answer(sock: socket.socket) -> bytes:
    """One answer (with a Content-Length) from a connection that stays open."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += receive(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?im)^content-length: (\d+)", head)[1])  # type: ignore[index]
    while len(body) < length:
        body += receive(sock)
    return head + b"\r\n\r\n" + body  # the body may have come after the head's chunk


def receive(sock: socket.socket) -> bytes:
    chunk = sock.recv(65_536)
    assert chunk, "the server closed the connection mid-answer"
    return chunk


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def rss_kib(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB$", text, re.MULTILINE)[1])  # type: ignore[index]


def test_endless_header_lines_get_431_and_memory_stays_bounded(
    start_api: Callable[..., Api],
) -> None:
    api = start_api()
    assert api.predict().status_code == 200  # warm: the first request's own allocations
    before = rss_kib(api.process.pid)
    sent = 0
    with api.connect() as sock:
        sock.sendall(b"POST /predict HTTP/1.1\r\nHost: x\r\n")
        # Lines until the server answers: a server that holds them all never does.
        while not select.select([sock], [], [], 0)[0]:
            assert sent < FLOOD_CAP_BYTES, f"no answer after {sent} bytes of headers"
            sock.sendall(LINE)
            sent += len(LINE)
        answer = read_to_end(sock)
    grown = rss_kib(api.process.pid) - before
    assert status(answer) == 431, answer
    assert b"larger than 16384 bytes (OCTR_MAX_HEADER_BYTES)" in answer
    assert grown < RSS_GROWTH_BOUND_KIB, f"RSS grew {grown} KiB"
    assert api.predict().status_code == 200
    assert api.refusals()["header_bytes"] == 1


def test_a_head_is_measured_against_the_bound_when_it_arrives_whole(
    start_api: Callable[..., Api],
) -> None:
    api = start_api(OCTR_MAX_HEADER_BYTES="4096")
    auth = {"Authorization": f"Bearer {PREDICT_KEY}"}
    fits = httpx.post(f"{api.url}/predict", json=PREDICT, headers={**auth, "X-Pad": "a" * 3000})
    assert fits.status_code == 200, fits.text
    over = httpx.post(f"{api.url}/predict", json=PREDICT, headers={**auth, "X-Pad": "a" * 5000})
    assert over.status_code == 431
    assert over.headers["connection"] == "close"
    assert "larger than 4096 bytes (OCTR_MAX_HEADER_BYTES)" in over.json()["detail"]
    assert api.refusals()["header_bytes"] == 1


def test_a_pipelined_request_after_a_large_body_is_not_taken_for_a_large_head(
    start_api: Callable[..., Api],
) -> None:
    api = start_api(OCTR_MAX_HEADER_BYTES="4096")
    body = json.dumps({"features": {f"f{i}": "a" * 1000 for i in range(20)}}).encode()
    first = (
        b"POST /predict HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {PREDICT_KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    second = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    with api.connect() as sock:
        sock.sendall(first + second[:20])  # the next head begins after a 20 KB body
        assert status(read_answer(sock)) == 200
        sock.sendall(second[20:])  # and ends in a read of its own
        assert status(read_to_end(sock)) == 200


def test_a_connection_that_sends_nothing_is_closed(start_api: Callable[..., Api]) -> None:
    api = start_api(OCTR_HEADER_TIMEOUT_S="0.5", OCTR_IDLE_TIMEOUT_S=NEVER)
    with api.connect() as sock:
        assert read_to_end(sock) == b""  # closed, silently: no request began
    assert api.refusals()["header_timeout"] == 1


@pytest.mark.parametrize("first", ["its first request", "a request after another"])
def test_a_head_sent_slowly_is_answered_408_and_closed(
    start_api: Callable[..., Api], first: str
) -> None:
    api = start_api(OCTR_HEADER_TIMEOUT_S="0.5", OCTR_IDLE_TIMEOUT_S=NEVER)
    with api.connect() as sock:
        if first == "a request after another":  # a kept-alive connection: due from its first byte
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert status(read_answer(sock)) == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        deadline = time.monotonic() + 30
        # A header a tenth of a second, for ever: until the server answers.
        while not select.select([sock], [], [], 0.1)[0]:
            assert time.monotonic() < deadline, "the slow head was never cut off"
            sock.sendall(b"X: y\r\n")
        answer = read_to_end(sock)
    assert status(answer) == 408, answer
    assert b"did not arrive within 0.5s (OCTR_HEADER_TIMEOUT_S)" in answer
    assert api.refusals()["header_timeout"] == 1


def test_idle_connections_new_or_kept_alive_are_closed(start_api: Callable[..., Api]) -> None:
    api = start_api(OCTR_IDLE_TIMEOUT_S="0.5", OCTR_HEADER_TIMEOUT_S=NEVER)
    with api.connect() as fresh, api.connect() as kept:
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = read_to_end(kept)  # the answer, then the close once idle
        assert status(answer) == 200 and b"connection: close" not in answer.lower()
        assert read_to_end(fresh) == b""
    assert api.refusals().get("header_timeout", 0) == 0  # idle is not a refusal


def busy(api: Api) -> socket.socket:
    """A connection with a request in progress: its head sent, its body still to come."""
    sock = api.connect()
    sock.sendall(b"POST /learn HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    return sock


def test_a_new_connection_past_the_limit_closes_the_longest_idle_one(
    start_api: Callable[..., Api],
) -> None:
    api = start_api(
        OCTR_MAX_CONNECTIONS="20", OCTR_IDLE_TIMEOUT_S=NEVER, OCTR_HEADER_TIMEOUT_S=NEVER
    )
    held = [api.connect() for _ in range(19)]
    try:
        until(lambda: api.connections() == 20, "19 idle connections and the scrape's")
        # At the limit, each new connection (a /predict's) makes room by closing the one
        # that has waited longest: the first held, then the next.
        for closed in range(3):
            held.append(api.connect())
            until(lambda: api.connections() == 20, "the limit reached")
            assert api.predict().status_code == 200
            assert read_to_end(held[closed]) == b""  # closed quietly
        assert api.refusals()["idle_evicted"] >= 3
        assert api.connections() <= 20
    finally:
        for sock in held:
            sock.close()


def test_when_every_connection_is_busy_a_new_one_gets_503_with_retry_after(
    start_api: Callable[..., Api],
) -> None:
    api = start_api(
        OCTR_MAX_CONNECTIONS="20",
        OCTR_IDLE_TIMEOUT_S=NEVER,
        OCTR_HEADER_TIMEOUT_S=NEVER,
        OCTR_BODY_TIMEOUT_S=NEVER,
    )
    held = [busy(api) for _ in range(19)]
    try:
        until(lambda: api.connections() == 20, "19 busy connections and the scrape's")
        held.append(busy(api))
        refused = api.predict()
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert "OCTR_MAX_CONNECTIONS" in refused.json()["detail"]
        with api.connect() as extra:  # answered as it opens, before it sends anything
            assert status(read_to_end(extra)) == 503
    finally:
        for sock in held:
            sock.close()
    until(lambda: api.predict().status_code == 200, "a /predict once the busy ones closed")
    assert api.refusals()["concurrency"] >= 2


def test_idle_sockets_past_the_limit_never_keep_a_keyed_predict_out(
    start_api: Callable[..., Api],
) -> None:
    api = start_api(OCTR_MAX_CONNECTIONS="20", OCTR_IDLE_TIMEOUT_S="0.5")
    idle = [api.connect() for _ in range(30)]
    assert api.predict().status_code == 200  # at once: an idle one makes room
    try:
        # Every one closed by the server, quietly: made room for a newer one, or idle.
        answers = [read_to_end(sock) for sock in idle]
    finally:
        for sock in idle:
            sock.close()
    assert answers == [b""] * len(idle)
    assert api.refusals().get("concurrency", 0) == 0


def keyed_busy(api: Api, key: str) -> socket.socket:
    """A /learn with ``key`` in progress: its head sent, its body still to come."""
    sock = api.connect()
    head = f"POST /learn HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
    sock.sendall(f"{head}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{".encode())
    return sock


def test_a_key_past_its_requests_in_progress_gets_429_and_others_are_served(
    start_api: Callable[..., Api],
) -> None:
    api = start_api(OCTR_MAX_REQUESTS_PER_KEY="2", OCTR_BODY_TIMEOUT_S=NEVER)
    held = [keyed_busy(api, LEARN_KEY) for _ in range(2)]
    try:
        until(lambda: api.connections() == 3, "two requests in progress and the scrape")
        with keyed_busy(api, LEARN_KEY) as third:
            answer = read_answer(third)
        assert status(answer) == 429
        assert b"retry-after: 1" in answer.lower()
        assert b"OCTR_MAX_REQUESTS_PER_KEY" in answer
        assert api.predict(PREDICT_KEY).status_code == 200  # another key is served
    finally:
        for sock in held:
            sock.close()
    # The shares come back when the requests end, however they end.
    until(
        lambda: (
            httpx.post(
                f"{api.url}/learn",
                json={"features": {"a": "b"}, "label": 1},
                headers={"Authorization": f"Bearer {LEARN_KEY}"},
            ).status_code
            == 202
        ),
        "a /learn once the held ones ended",
    )
    assert api.refusals()["key_concurrency"] >= 1


def test_the_api_refuses_to_start_when_the_connections_set_cannot_fit(redis_url: str) -> None:
    process = launch(redis_url, free_port(), None, (256, 256), OCTR_MAX_CONNECTIONS="1000")
    _, stderr = process.communicate(timeout=60)
    assert_one_line(
        (process.returncode, stderr.decode()),
        "OCTR_MAX_CONNECTIONS=1000 needs 3064 open files",
        "the limit is 256",
        f"set OCTR_MAX_CONNECTIONS to at most {(256 - FD_RESERVE) // 3}",
    )


def test_with_the_default_the_api_serves_fewer_connections_and_says_so(
    start_api: Callable[..., Api],
) -> None:
    api = start_api((256, 256))  # a hard limit below what the default 1,000 needs
    assert api.predict().status_code == 200
    fits = (256 - FD_RESERVE) // 3
    assert f"fits {fits} connections, not the default 1000" in api.log.read_text()


def test_the_api_raises_its_open_file_limit_to_the_hard_one(
    start_api: Callable[..., Api],
) -> None:
    needed = 3 * 20 + FD_RESERVE
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= needed:
        pytest.skip(f"the hard open-file limit here ({hard}) leaves nothing to raise")
    # Below what 20 connections need: it starts only by raising the soft limit.
    api = start_api((needed - 1, hard), OCTR_MAX_CONNECTIONS="20")
    limits = Path(f"/proc/{api.process.pid}/limits").read_text()
    soft_now, hard_now = re.findall(r"^Max open files\s+(\S+)\s+(\S+)", limits, re.MULTILINE)[0]
    assert soft_now == hard_now


def test_the_protocol_counts_in_the_metrics_it_is_given(redis_url: str) -> None:
    """In process, on a private registry: the metrics are the ones it was built with."""
    settings = Settings(redis_url=redis_url, max_header_bytes=1024, **AUTH)
    registry = CollectorRegistry()
    app = create_app(settings, registry)
    port = free_port()
    config = uvicorn.Config(
        app, port=port, http=bounded_protocol(settings, app.state.metrics), log_level="warning"
    )
    server = uvicorn.Server(config)

    def open_connections() -> float | None:
        return registry.get_sample_value("online_ctr_http_connections")

    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        until(lambda: server.started, "uvicorn to start")
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            until(lambda: open_connections() == 1, "the connection to be counted")
            sock.sendall(b"GET /healthz HTTP/1.1\r\nX-Pad: " + b"a" * 2000 + b"\r\n\r\n")
            assert status(read_to_end(sock)) == 431
        until(lambda: open_connections() == 0, "the closed connection to be counted out")
    finally:
        server.should_exit = True
        thread.join(30)
    refused = registry.get_sample_value(
        "online_ctr_http_refusals_total", {"reason": "header_bytes"}
    )
    assert refused == 1


def test_the_protocol_tells_the_app_which_requests_are_in_progress(redis_url: str) -> None:
    """The app's RequestsInProgress is the server's set of request tasks: a request whose
    body has not come is in it until it ends, and a /predict beside it (its pass then runs
    after the others, see service.api.coalesce) is answered as it is alone."""
    settings = Settings(redis_url=redis_url, **AUTH)
    app = create_app(settings, CollectorRegistry())
    port = free_port()
    protocol = bounded_protocol(settings, app.state.metrics, app.state.requests)
    server = uvicorn.Server(uvicorn.Config(app, port=port, http=protocol, log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    try:
        until(lambda: server.started, "uvicorn to start")
        url, auth = f"http://127.0.0.1:{port}/predict", {"Authorization": f"Bearer {PREDICT_KEY}"}

        def predict() -> httpx.Response:
            return httpx.post(url, json=PREDICT, headers=auth, timeout=30)

        alone = predict()
        assert alone.status_code == 200
        assert not app.state.requests.others()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as held:
            held.sendall(
                f"POST /predict HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {PREDICT_KEY}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n".encode()
            )
            until(lambda: len(app.state.requests.tasks) == 1, "the held request's task")
            beside = predict()
            assert beside.status_code == 200
            assert beside.json() == alone.json()
            # The held one, still waiting; the one beside leaves the set as its task ends, which
            # can be just after its client has the answer (a fresh-clone CI run saw 2 here).
            until(lambda: len(app.state.requests.tasks) == 1, "the request beside to end")
        until(lambda: len(app.state.requests.tasks) == 0, "the held request to end")
    finally:
        server.should_exit = True
        thread.join(30)
