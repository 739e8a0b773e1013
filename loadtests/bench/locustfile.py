"""Realistic traffic for a running online-ctr service, with Locust.

Each simulated user is an ad server showing impressions. Per impression it asks ``/predict``
for the ad's click probability, and some time later (an exponential delay, mean
``--feedback-delay-s``) sends the outcome to ``/learn``. The examples and their outcomes are
rows of the Criteo and Avazu files in ``../shared/data``, so the click rate is the data's
(Criteo head file 21.8%, Avazu 17.1%). A share of the impressions (``--page-share``) is a page
of several ads (``--page-size``): one batch ``/predict`` and, later, one batch ``/learn``.

Headless, against a service on port 8000 (see ``loadtests/README.md``)::

    .venv/bin/locust -f loadtests/bench/locustfile.py --headless -u 50 -r 10 -t 60s \
        --host http://127.0.0.1:8000

This models traffic; it is not the throughput benchmark (``python -m loadtests.bench``), whose
generator is ``wrk``: Locust's own Python overhead would be the bottleneck there.
"""

from __future__ import annotations

import heapq
import itertools
import random
import time
from functools import cache
from pathlib import Path
from typing import Any

from locust import FastHttpUser, between, events, task

from online_ctr.learning.readers import read_examples

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data"
FILES = (
    ("criteo/criteo_kaggle_train_head10k.tsv", "criteo"),
    ("avazu/avazu_train_head10k.csv", "avazu"),
)
#: At most this many feedback requests wait per user: an impression's feedback that would
#: exceed it is sent at once (a bound on memory if the service stalls).
MAX_PENDING = 10_000

Row = tuple[dict[str, Any], int]


@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
def _options(parser: Any) -> None:
    parser.add_argument("--data-dir", default=str(DATA_DIR), help="the shared data folder")
    parser.add_argument(
        "--feedback-delay-s", type=float, default=2.0, help="mean delay of the click feedback"
    )
    parser.add_argument(
        "--page-share", type=float, default=0.2, help="share of impressions that are pages"
    )
    parser.add_argument("--page-size", type=int, default=10, help="ads on a page")


@cache
def rows(data_dir: str) -> tuple[Row, ...]:
    """Every row of the Criteo and Avazu files, read once per process."""
    found: list[Row] = []
    for name, fmt in FILES:
        found += read_examples(Path(data_dir) / name, fmt)
    return tuple(found)


class AdServer(FastHttpUser):
    """Impressions now, their feedback later."""

    wait_time = between(0.05, 0.5)

    def on_start(self) -> None:
        options = self.environment.parsed_options
        self.data = rows(options.data_dir)
        self.delay_s = options.feedback_delay_s
        self.page_share = options.page_share
        self.page_size = options.page_size
        self.random = random.Random()
        self.pending: list[tuple[float, int, str, dict[str, Any]]] = []
        self.sequence = itertools.count()

    @task
    def impression(self) -> None:
        self.send_due_feedback()
        if self.random.random() < self.page_share:
            page = self.random.sample(self.data, self.page_size)
            body = {"examples": [{"features": x} for x, _ in page]}
            feedback = {"examples": [{"features": x, "label": y} for x, y in page]}
            self.post("/predict", body, "/predict [page]", 200, "predictions")
            self.later("/learn [page]", feedback)
        else:
            x, y = self.random.choice(self.data)
            self.post("/predict", {"features": x}, "/predict", 200, "probability")
            self.later("/learn", {"features": x, "label": y})

    def later(self, name: str, body: dict[str, Any]) -> None:
        """Schedule a feedback request after a random delay."""
        due = time.monotonic() + self.random.expovariate(1.0 / self.delay_s)
        heapq.heappush(self.pending, (due, next(self.sequence), name, body))
        if len(self.pending) > MAX_PENDING:
            self.send_feedback(heapq.heappop(self.pending))

    def send_due_feedback(self) -> None:
        now = time.monotonic()
        while self.pending and self.pending[0][0] <= now:
            self.send_feedback(heapq.heappop(self.pending))

    def send_feedback(self, item: tuple[float, int, str, dict[str, Any]]) -> None:
        _, _, name, body = item
        self.post("/learn", body, name, 202, "accepted")

    def post(self, path: str, body: dict[str, Any], name: str, status: int, key: str) -> None:
        """POST JSON; a wrong status or an answer without ``key`` counts as a failure."""
        with self.client.post(path, json=body, name=name, catch_response=True) as answer:
            if answer.status_code != status:
                answer.failure(f"status {answer.status_code}: {(answer.text or '')[:200]}")
            elif key not in (answer.json() or {}):
                answer.failure(f"answer without {key!r}")
