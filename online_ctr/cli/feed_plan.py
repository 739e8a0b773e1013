"""What ``online-ctr feed`` sends: a click log's rows in batches, each named by an
``Idempotency-Key`` made from the file's identity and the batch's first row.

The keys are the same every time the same file is fed with the same ``--batch-size``, so a
feed run again after an interruption is answered, for every batch the service accepted
before, as it was then (``Idempotent-Replayed``), and appends nothing: each row is learned
once. A batch sent again with other rows under its key (another ``--batch-size``) is a 409
from the service, never learned twice. With ``--join`` the rows' prediction ids are made the
same way, one per row.

>>> plan = list(batches(iter([({"a": "x"}, 1), ({"a": "y"}, 0), ({"a": "z"}, 1)]), 2, "f1"))
>>> [(b.first_row, len(b.rows), b.key) for b in plan]
[(0, 2, 'feed-f1-learn-0'), (2, 1, 'feed-f1-learn-2')]
>>> plan[1].prediction_ids()
['feed-f1-2']
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from online_ctr.learning.readers import Row

#: How much of the file's start identifies it: a file grown by appended rows, or a copy, is
#: the same feed; a file under this size is identified by all of it.
IDENTITY_BYTES = 1 << 20
#: What a ``--feed-id`` may hold: what an Idempotency-Key and a prediction id may (less ``/``,
#: kept out of the ids a person reads), short enough for both.
FEED_ID = re.compile(r"[A-Za-z0-9._:+=~-]{1,64}")


def file_identity(path: Path) -> str:
    """The feed id of a file: 16 hex digits of the SHA-256 of its first MiB."""
    with path.open("rb") as stream:
        return hashlib.sha256(stream.read(IDENTITY_BYTES)).hexdigest()[:16]


@dataclass(frozen=True)
class FeedBatch:
    """Rows ``first_row`` to ``first_row + len(rows) - 1`` of the file (0-based, headers
    not counted), and the key they are sent under."""

    feed_id: str
    first_row: int
    rows: list[Row]
    mode: str = "learn"

    @property
    def key(self) -> str:
        """The batch's Idempotency-Key (of its ``/learn``)."""
        return f"feed-{self.feed_id}-{self.mode}-{self.first_row}"

    @property
    def end(self) -> int:
        """The row after the batch's last: where a feed resumes once it is accepted."""
        return self.first_row + len(self.rows)

    def prediction_ids(self) -> list[str]:
        """One prediction id per row, for ``--join``."""
        return [f"feed-{self.feed_id}-{row}" for row in range(self.first_row, self.end)]


def batches(
    rows: Iterator[Row], size: int, feed_id: str, start: int = 0, mode: str = "learn"
) -> Iterator[FeedBatch]:
    """``rows`` from row ``start`` on, in consecutive batches of ``size`` (the last shorter)."""
    if size < 1 or start < 0:
        raise ValueError(f"size must be >= 1 and start >= 0, got {size} and {start}")
    first = start
    remaining = islice(rows, start, None)
    while chunk := list(islice(remaining, size)):
        yield FeedBatch(feed_id, first, chunk, mode)
        first += len(chunk)
