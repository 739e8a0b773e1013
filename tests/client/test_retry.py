"""The retry policy's decisions (no service needed), and the client's import footprint."""

from __future__ import annotations

import random
import subprocess
import sys

import httpx
import pytest

from online_ctr.client import Retry, UnreachableError
from online_ctr.client.retry import Attempts

pytestmark = pytest.mark.processes

REQUEST = httpx.Request("POST", "http://127.0.0.1/learn")


class Clock:
    """A clock the test moves (the clock may be faked; nothing else is)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def attempts(policy: Retry, clock: Clock | None = None) -> Attempts:
    return Attempts(policy, random.Random(7), clock or Clock())


def answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, request=REQUEST)


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    state = attempts(Retry(attempts=8, backoff_s=0.1, max_backoff_s=0.5, deadline_s=100))
    waits = [state.after_response(answer(503)) for _ in range(8)]
    steps = [0.1, 0.2, 0.4, 0.5, 0.5, 0.5, 0.5]
    assert all(w is not None and s / 2 <= w <= s for w, s in zip(waits, steps, strict=False))
    assert waits[-1] is None  # no ninth attempt after the eighth failed


@pytest.mark.parametrize("status", [408, 429, 502, 503, 504])
def test_transient_statuses_are_retried(status: int) -> None:
    assert attempts(Retry()).after_response(answer(status)) is not None


@pytest.mark.parametrize("status", [200, 202, 400, 401, 403, 404, 409, 413, 415, 422, 500])
def test_other_statuses_are_the_answer(status: int) -> None:
    assert attempts(Retry()).after_response(answer(status)) is None


def test_retry_after_is_a_lower_bound_within_the_deadline() -> None:
    clock = Clock()
    state = attempts(Retry(deadline_s=10, backoff_s=0.1), clock)
    assert state.after_response(answer(503, **{"Retry-After": "3"})) == 3.0
    clock.now = 8.0  # 2 s left: a 3 s wait would pass the deadline
    assert state.after_response(answer(503, **{"Retry-After": "3"})) is None
    assert state.timeout_s(10.0) == 2.0  # the last attempt gets what is left


def test_transport_errors() -> None:
    state = attempts(Retry(attempts=2, backoff_s=0.01))
    assert state.after_error(httpx.ConnectError("refused", request=REQUEST)) > 0
    with pytest.raises(UnreachableError, match="after 2 attempt"):
        state.after_error(httpx.ReadTimeout("slow", request=REQUEST))
    with pytest.raises(UnreachableError, match="UnsupportedProtocol"):
        attempts(Retry()).after_error(httpx.UnsupportedProtocol("ftp", request=REQUEST))


def test_a_policy_needs_an_attempt() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Retry(attempts=0)


def test_the_client_imports_only_httpx_and_the_standard_library() -> None:
    code = (
        "import sys, online_ctr.client\n"
        "ours = {'service', 'workers', 'numpy', 'numba', 'fastapi', 'pydantic', 'redis'}\n"
        "print(sorted(ours & {name.split('.')[0] for name in sys.modules}))\n"
        "print(sorted(n for n in sys.modules if n.startswith('online_ctr.')"
        " and not n.startswith('online_ctr.client')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]
