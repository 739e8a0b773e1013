"""The retry policy: which failures are worth another attempt, and how long to wait first.

Retried: a 503 (Redis unavailable; its ``Retry-After`` is a lower bound on the wait), a 429
(the key has its most requests in progress, ``OCTR_MAX_REQUESTS_PER_KEY``; the same), a 408
(the body arrived too slowly), a 502 or 504 from a proxy in front of the service, connection
errors and timeouts. Never retried: any other 4xx, which would get the same answer again, and
a 500. Retrying is safe for every call the client makes: ``/predict`` and ``GET /models`` only
read, ``/learn`` carries an ``Idempotency-Key`` that stays the same on every retry of a
request (the service appends a request's examples once however often it arrives), and
``DELETE /models`` ends in the same state however often it runs.

The retry loop is written once, :func:`attempts`: it yields each attempt to make, and the
blocking and asyncio clients only sleep, send and report what came back (``for step in
attempts(...)``), so the two cannot come to retry differently.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime

import httpx

from online_ctr.client.errors import UnreachableError

logger = logging.getLogger(__name__)

#: Statuses that say "not now" rather than "not like this".
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
#: Transport failures after which the same request may succeed.
RETRY_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
#: The shortest per-attempt timeout, even when the deadline is nearer.
MIN_TIMEOUT_S = 0.05


@dataclass(frozen=True)
class Retry:
    """At most ``attempts`` tries within ``deadline_s`` seconds of the first; between them,
    exponential backoff from ``backoff_s`` up to ``max_backoff_s``, jittered (each wait is
    uniform in [half, all] of its step, so clients that failed together spread out).

    Example::

        Retry(attempts=10, deadline_s=60)  # ride out a Redis restart of up to a minute
        Retry(attempts=1)  # never retry
    """

    attempts: int = 5
    deadline_s: float = 30.0
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {self.attempts}")
        if min(self.deadline_s, self.backoff_s, self.max_backoff_s) < 0:
            raise ValueError("deadline_s, backoff_s and max_backoff_s must not be negative")

    def start(self, rng: random.Random | None = None) -> Attempts:
        """The retry state of one request, its deadline counted from now."""
        return Attempts(self, rng or random.Random())


def retry_after_s(value: str | None, now_s: Callable[[], float] = time.time) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP date), if it parses.

    >>> retry_after_s("2"), retry_after_s(None), retry_after_s("soon")
    (2.0, None, None)
    >>> retry_after_s("Thu, 01 Jan 1970 00:00:10 GMT", now_s=lambda: 4.0)
    6.0
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_s())


@dataclass
class Attempts:
    """One request's attempts so far and its deadline; it decides about each outcome."""

    policy: Retry
    rng: random.Random
    clock: Callable[[], float] = time.monotonic
    made: int = 0
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = self.clock() + self.policy.deadline_s

    def timeout_s(self, timeout_s: float) -> float:
        """The next attempt's timeout: the configured one, cut to what the deadline leaves."""
        return max(MIN_TIMEOUT_S, min(timeout_s, self.deadline - self.clock()))

    def after_response(self, response: httpx.Response) -> float | None:
        """Seconds to wait before sending again, or None: this response is the answer."""
        if response.status_code not in RETRY_STATUSES:
            return None
        wait = self._next_wait(retry_after_s(response.headers.get("retry-after")))
        if wait is not None:
            logger.info(
                "%s answered %d; retrying in %.2fs", response.url, response.status_code, wait
            )
        return wait

    def after_error(self, error: httpx.TransportError) -> float:
        """Seconds to wait before sending again; an :class:`UnreachableError` if not to."""
        wait = self._next_wait(None) if isinstance(error, RETRY_ERRORS) else None
        if wait is None:
            raise UnreachableError(
                f"no answer after {self.made} attempt(s): {type(error).__name__}: {error}"
            ) from error
        logger.info("%s: %s; retrying in %.2fs", type(error).__name__, error, wait)
        return wait

    def _next_wait(self, at_least_s: float | None) -> float | None:
        self.made += 1
        if self.made >= self.policy.attempts:
            return None
        step = min(self.policy.max_backoff_s, self.policy.backoff_s * 2 ** (self.made - 1))
        wait = self.rng.uniform(step / 2, step)
        if at_least_s is not None:
            wait = max(wait, at_least_s)
        return wait if self.clock() + wait < self.deadline else None


@dataclass
class Attempt:
    """One attempt :func:`attempts` asks for: wait ``wait_s``, then send with ``timeout_s``
    (read after the wait: what the deadline leaves then), and report the outcome."""

    wait_s: float
    _attempts: Attempts
    _timeout_s: float
    response: httpx.Response | None = None
    error: httpx.TransportError | None = None

    @property
    def timeout_s(self) -> float:
        """This attempt's timeout: the configured one, cut to what the deadline leaves."""
        return self._attempts.timeout_s(self._timeout_s)

    def answered(self, response: httpx.Response) -> None:
        """The attempt got ``response`` (its body read if it may be retried)."""
        self.response = response

    def failed(self, error: httpx.TransportError) -> None:
        """The attempt got no answer."""
        self.error = error

    @property
    def answer(self) -> httpx.Response:
        """The response the loop ended with."""
        assert self.response is not None, "attempts() ended without a response"
        return self.response


def attempts(
    policy: Retry, timeout_s: float, rng: random.Random | None = None
) -> Iterator[Attempt]:
    """The retry loop: yields each attempt of one request until one is answered for good (the
    last attempt yielded holds the :attr:`Attempt.answer`); raises :class:`UnreachableError`
    when a failure may not be retried, or attempts or deadline are spent.

    A response that is retried is dropped unread: an attempt whose response may be retried
    (a streamed one) reads its body before reporting it.
    """
    state = policy.start(rng)
    wait = 0.0
    while True:
        step = Attempt(wait, state, timeout_s)
        yield step
        if step.error is not None:
            wait = state.after_error(step.error)
            continue
        next_wait = state.after_response(step.answer)
        if next_wait is None:
            return
        wait = next_wait
