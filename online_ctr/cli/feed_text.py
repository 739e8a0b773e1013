"""What ``online-ctr feed`` says: its summary, and one line for each way it can stop.

>>> interrupted(0, 2000).split(", or")[0]
'; rows 0-1999 were accepted: resume with --start 2000'
>>> interrupted(0, 0)
''
"""

from __future__ import annotations

from online_ctr.cli.api_target import ApiTarget
from online_ctr.cli.feed_sender import Outcome
from online_ctr.client.errors import ApiError, ClientError, OnlineCtrError, UnreachableError

#: What each refusal of a label by prediction id means, for the summary.
REASONS = {
    "repeated": "labelled by an earlier feed",
    "unknown": "never logged, or forgotten",
    "late": "their join window had closed",
    "unlogged": "not logged by /predict: OCTR_MAX_PENDING_IMPRESSIONS",
    "relogged": (
        "learned from an earlier feed, but the service had forgotten their ids: /predict "
        "logged them again, to be learned as negatives when their join window closes (run a "
        "--join feed again within the join window, or go on with --start)"
    ),
}


def interrupted(start: int, next_row: int) -> str:
    """How to resume a feed that sent rows ``start`` to ``next_row - 1``; nothing if none."""
    if next_row <= start:
        return ""
    return (
        f"; rows {start}-{next_row - 1} were accepted: resume with --start {next_row}, or run "
        "the same command again (the service skips the batches it has)"
    )


def service_error(error: OnlineCtrError, target: ApiTarget) -> str:
    """The one line for what the service (or its absence) stopped the feed with."""
    if isinstance(error, UnreachableError):
        return f"{target.unreachable()}: {error}"
    if not isinstance(error, ApiError):  # an answer of the wrong shape: another service?
        return f"{error} (from {target.url})"
    said = f"the API at {target.url} answered {error.status}: {error.message}"
    said += "".join(f"; {name}: {message}" for name, message in error.errors)
    if isinstance(error, ClientError) and error.status == 401:
        flag = "--api-key-file" if target.api_key is None else "another --api-key-file"
        return f"{said} (pass {flag}: a key of the learn scope)"
    if isinstance(error, ClientError) and error.status == 403:
        return f"{said} (feed needs the learn scope, and predict too with --join)"
    if error.status == 413:
        return f"{said} (a smaller --batch-size makes smaller bodies)"
    if error.status == 409 and "Idempotency-Key" in error.message:
        return f"{said} (an earlier feed of this file sent other rows there: use its --batch-size)"
    return said


def summary(done: Outcome, start: int, end: int, url: str) -> str:
    """The last line of a finished feed: what the service did with rows ``start`` to ``end``."""
    line = f"sent rows {start}-{end - 1} to {url}: {done.accepted:,} accepted"
    if end <= start:
        line = f"sent no row to {url} (none from row {start} on)"
    if done.replayed:
        line += f" ({done.replayed:,} of them by an earlier feed)"
    for reason, count in sorted(done.refused.items()):
        if count:
            line += f", {count:,} {reason} ({REASONS.get(reason, 'refused')})"
    return line
