"""What the client raises: the service's refusals, its failures, and an unreachable service."""

from __future__ import annotations


class OnlineCtrError(Exception):
    """Base of every client error.

    ``examples_done`` counts the examples of a batched call (``predict_many``, ``learn_many``)
    whose requests had succeeded before this one failed: those are scored or accepted, the
    rest are not (requests are sent in order).
    """

    examples_done: int = 0


class ApiError(OnlineCtrError):
    """The service answered with an error status; ``message`` is its ``detail``."""

    def __init__(self, status: int, message: str, errors: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        #: ``(field, message)`` for each invalid field of a 422.
        self.errors = errors


class ClientError(ApiError):
    """A 4xx: the request is wrong (bad input, no or wrong API key, unknown model); never
    retried, since sending it again would get the same answer (408 excepted, which is)."""


class InvalidExampleError(ClientError, ValueError):
    """An example the client refuses before sending it (a label that is not 0 or 1, a weight
    that is not a finite number): the 422 the service would answer, without the request. ``errors``
    names the field (``label``; in a batch ``examples[i].label``, ``i`` counted from the
    first example given). A ``ValueError`` too, as such an argument is."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(422, f"invalid example, not sent: {field}: {message}", ((field, message),))


class ServerError(ApiError):
    """A 5xx: a 500, or a 503 that lasted longer than the retry policy allows."""


class UnreachableError(OnlineCtrError):
    """No answer: connection errors or timeouts on every attempt; the last one is the cause."""
