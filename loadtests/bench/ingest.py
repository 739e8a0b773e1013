"""``/learn`` ingest: examples one API process accepts per second, 1,000-example bodies.

No worker runs meanwhile, so nothing else competes for the cores and every accepted request
stays in the model's stream. Accepted means in the stream: a 202 within wrk's timed window
says the body is in the stream, and the stream's growth over the run (``stream_lag`` of
``GET /models/default``, in entries, one per request: a ``/learn`` request is never split)
must hold at least those; the figure is the 202 answers times the examples per body over
wrk's duration. The stream may hold a few more, the requests still in flight when wrk
stopped, which are not counted: their answers came after the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtests.common import feed
from loadtests.common.wrk_runs import Load, LoadRun, load, write_learn_bodies

#: Examples per ``/learn`` body: the API's default per-request limit.
BODY_EXAMPLES = 1000
CONNECTIONS = 8


@dataclass(frozen=True)
class Ingest:
    """One wrk run against ``/learn``, and the examples the stream gained meanwhile."""

    run: LoadRun
    in_stream_examples: int

    @property
    def accepted_examples(self) -> int:
        """Examples of the requests answered 202 within wrk's window (all in the stream)."""
        return self.run.wrk.requests * BODY_EXAMPLES

    @property
    def accepted_per_second(self) -> float:
        return self.accepted_examples / self.run.wrk.seconds


def stream_entries(api_url: str) -> int:
    """Entries in the model's stream that no worker has applied."""
    answer = httpx.get(f"{api_url}/models/default", timeout=10)
    answer.raise_for_status()
    return int(answer.json()["stream_lag"])


def measure(
    api_url: str, folder: Path, rows: list[feed.Row], duration_s: float, pids: dict[str, int]
) -> Ingest:
    """Post 1,000-example bodies of the rows for ``duration_s``; count what the stream got.

    The model must exist (a worker created it) and no worker may be running.
    """
    bodies = write_learn_bodies(folder / "learn.jsonl", rows, BODY_EXAMPLES)
    before = stream_entries(api_url)
    how = Load(bodies, BODY_EXAMPLES, CONNECTIONS, duration_s)
    run = load("learn", f"{api_url}/learn", how, pids)
    entries = stream_entries(api_url) - before
    if entries < run.wrk.requests:
        raise RuntimeError(f"wrk got {run.wrk.requests} answers, the stream {entries} entries")
    return Ingest(run, entries * BODY_EXAMPLES)
