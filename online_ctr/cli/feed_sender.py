"""The requests of ``online-ctr feed``: a batch to ``/learn``, or with ``--join`` to
``/predict`` under its rows' prediction ids and then their labels to ``/learn``.

Each request is made as the client makes its own (:mod:`online_ctr.client`): the same retry
loop (503 and 429 retried after their ``Retry-After``, connection errors with backoff), the
same ``Idempotency-Key`` on every attempt, the service's errors typed by status. The client
itself does not send labels by prediction id yet, nor keys chosen by the caller for a batch.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from online_ctr.cli.api_target import ApiTarget
from online_ctr.cli.feed_plan import FeedBatch
from online_ctr.client import answers, operations
from online_ctr.client.errors import ClientError
from online_ctr.client.operations import IDEMPOTENCY_KEY, Call
from online_ctr.client.retry import Retry, attempts

#: A feed rides out a Redis restart or failover of up to about this long.
PATIENCE = Retry(attempts=30, deadline_s=300.0, max_backoff_s=10.0)


@dataclass
class Outcome:
    """What the service did with a batch's rows: ``accepted`` (into the stream, now or by an
    earlier feed whose answer was ``replayed``), and the others ``refused`` by reason."""

    accepted: int = 0
    replayed: int = 0
    refused: Counter[str] = field(default_factory=Counter)

    def add(self, other: Outcome) -> None:
        """Count ``other`` in as well."""
        self.accepted += other.accepted
        self.replayed += other.replayed
        self.refused.update(other.refused)


class Sender:
    """Sends batches to one API, for one model (None: the one the service serves)."""

    def __init__(
        self,
        target: ApiTarget,
        model: str | None,
        retry: Retry = PATIENCE,
        timeout_s: float = 30.0,
    ) -> None:
        self.retry, self.timeout_s = retry, timeout_s
        self._params = {"model": model} if model else {}
        self._http = httpx.Client(
            base_url=target.url, headers=operations.headers(target.api_key), timeout=timeout_s
        )

    def probe(self) -> None:
        """One ``GET /healthz``, not retried: an UnreachableError at once if nothing answers."""
        self._send(Call("GET", "/healthz"), Retry(attempts=1))

    def learn(self, batch: FeedBatch) -> Outcome:
        """``POST /learn`` of the batch's examples under its key."""
        body = {"examples": [{"features": x, "label": y} for x, y in batch.rows]}
        answer = self._send(
            Call("POST", "/learn", body, {IDEMPOTENCY_KEY: batch.key}, self._params)
        )
        return _accepted(answer)

    def join(self, batch: FeedBatch) -> Outcome:
        """``POST /predict`` of the batch under its prediction ids, then ``POST /learn`` of
        their labels by id under its key. A batch whose ids the service has logged already
        (an earlier feed got that far) goes on to its labels."""
        ids = batch.prediction_ids()
        logged, now = self._predict(batch, ids)
        labelled = [(i, y) for i, (_, y), ok in zip(ids, batch.rows, logged, strict=True) if ok]
        outcome = Outcome()
        if len(labelled) < len(ids):  # at the service's bound of pending impressions
            outcome.refused["unlogged"] = len(ids) - len(labelled)
        if labelled:
            body = {"examples": [{"prediction_id": i, "label": y} for i, y in labelled]}
            call = Call("POST", "/learn", body, {IDEMPOTENCY_KEY: batch.key}, self._params)
            labels = _accepted(self._send(call))
            outcome.add(labels)
            if now and labels.replayed:
                # Labelled by an earlier feed whose ids the service forgot since: this feed's
                # /predict logged them again, and nothing will label them now.
                outcome.refused["relogged"] = len(labelled)
        return outcome

    def _predict(self, batch: FeedBatch, ids: list[str]) -> tuple[list[bool], bool]:
        """Whether each row's impression is logged, and whether by this request (not by an
        earlier one)."""
        pairs = zip(batch.rows, ids, strict=True)
        examples = [{"features": x, "prediction_id": i} for (x, _), i in pairs]
        try:
            answer = self._send(Call("POST", "/predict", {"examples": examples}, {}, self._params))
        except ClientError as error:
            if error.status == 409 and "already used" in error.message:
                return [True] * len(ids), False  # nothing of it was logged: all were before
            raise
        served = [item.get("prediction_id") for item in _json(answer)["predictions"]]
        return [s == i for s, i in zip(served, ids, strict=True)], True  # null: not logged

    def _send(self, call: Call, retry: Retry | None = None) -> httpx.Response:
        for step in attempts(retry or self.retry, self.timeout_s):
            if step.wait_s:
                time.sleep(step.wait_s)
            try:
                step.answered(self._http.send(call.request(self._http, step.timeout_s)))
            except httpx.TransportError as error:
                step.failed(error)
        return answers.check(step.answer)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()


def _json(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    return body


def _accepted(response: httpx.Response) -> Outcome:
    """A ``/learn`` answer: its accepted count, and the labels it refused, by reason."""
    body = _json(response)
    refused = Counter(str(item["reason"]) for item in body.get("rejected") or ())
    accepted = int(body["accepted"])
    replayed = accepted if response.headers.get(answers.REPLAYED) == "true" else 0
    return Outcome(accepted, replayed, refused)
