"""The scale benchmark's side of the HTTP API: request bodies, filling a model with new
features, and waiting on ``GET /models/{name}`` until the workers have learned everything.

Only the API is used here, never the state layer's keys or encodings (nor
:mod:`loadtests.common.feed`, which writes stream entries itself), so the benchmark keeps working
when the state layer changes.

>>> factory = UniqueFeatures(per_example=3, seed=1)
>>> examples = json.loads(factory.body(2))["examples"]
>>> sorted(examples[0]["features"]), examples[0]["features"] != examples[1]["features"]
(['f00', 'f01', 'f02'], True)
"""

from __future__ import annotations

import json
import math
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import cycle, islice
from pathlib import Path

import httpx

from online_ctr.learning.readers import read_examples

#: The Criteo head file, under the data folder.
CRITEO = Path("criteo/criteo_kaggle_train_head10k.tsv")
#: Examples per ``/learn`` body, the API's default per-request limit.
BODY_EXAMPLES = 1000
#: How often the model's progress is read while waiting for the workers.
POLL_S = 0.02
#: Examples per body in the timed part of a fill: many bodies, so the worker is kept busy.
WINDOW_BODY_EXAMPLES = 100
#: Accepted ``/learn`` bodies not yet learned that the fill allows before it waits.
MAX_LAG_ENTRIES = 8
#: The workers must move the step at least this often, or the wait gives up.
STALL_S = 120.0


Row = tuple[dict[str, str | float], int]


def criteo_rows(data_dir: Path, limit: int | None = None) -> list[Row]:
    """The first ``limit`` rows of the Criteo head file as ``(features, label)``."""
    return list(read_examples(data_dir / CRITEO, "criteo", limit=limit))


def compact(document: object) -> bytes:
    """JSON without spaces, as bytes."""
    return json.dumps(document, separators=(",", ":")).encode()


def chunks(rows: Sequence[Row], size: int) -> list[Sequence[Row]]:
    """``rows`` in chunks of exactly ``size``, cycling them to fill the last (and the first,
    when there are fewer than ``size``).

    >>> [[x["a"] for x, _ in c] for c in chunks([({"a": "1"}, 0), ({"a": "2"}, 1)] * 2, 3)]
    [['1', '2', '1'], ['2', '1', '2']]
    """
    count = max(1, math.ceil(len(rows) / size))
    cycled = list(islice(cycle(rows), count * size))
    return [cycled[start : start + size] for start in range(0, len(cycled), size)]


def predict_bodies(path: Path, rows: Sequence[Row], per_body: int) -> Path:
    """A file of ``/predict`` bodies, one a line: single-example ones if ``per_body`` is 1,
    else ``{"examples": [...]}`` of ``per_body`` rows."""
    with path.open("wb") as out:
        for chunk in chunks(rows, per_body):
            examples = [{"features": x} for x, _ in chunk]
            out.write(compact(examples[0] if per_body == 1 else {"examples": examples}) + b"\n")
    return path


def learn_bodies(rows: Sequence[Row], per_body: int = BODY_EXAMPLES) -> list[bytes]:
    """``/learn`` bodies of ``per_body`` labelled examples each, covering ``rows``."""
    return [
        compact({"examples": [{"features": x, "label": y} for x, y in chunk]})
        for chunk in chunks(rows, per_body)
    ]


class UniqueFeatures:
    """``/learn`` bodies whose every feature is new: each example has ``per_example`` fields
    ``f00``, ``f01``... all valued by a token of this run and the example's serial number."""

    def __init__(self, per_example: int = 50, seed: int = 0) -> None:
        self.per_example = per_example
        self.fields = [f"f{i:02d}" for i in range(per_example)]
        self.random = random.Random(seed)
        self.token = uuid.UUID(int=self.random.getrandbits(128)).hex[:12]
        self.serial = 0

    def body(self, examples: int) -> bytes:
        """The next ``examples`` examples (labels: a 25% click rate) as one body."""
        out = []
        for serial in range(self.serial, self.serial + examples):
            value = f"{self.token}-{serial:x}"
            label = int(self.random.random() < 0.25)
            out.append({"features": dict.fromkeys(self.fields, value), "label": label})
        self.serial += examples
        return compact({"examples": out})


@dataclass(frozen=True)
class Progress:
    """What ``GET /models/{name}`` says about how far the model has learned."""

    step: int
    tracked: int
    lag: int


@dataclass(frozen=True)
class Fill:
    """Features added to the model by a fill, and the seconds until they were all learned."""

    features: int
    seconds: float

    @property
    def features_per_second(self) -> float:
        """NaN when nothing was added (the model was already that large)."""
        return self.features / self.seconds if self.features > 0 else math.nan


class ModelClient:
    """One model of a running API, over a keep-alive connection."""

    def __init__(self, url: str, model: str = "default") -> None:
        self.http = httpx.Client(base_url=url, timeout=60)
        self.model = model

    def close(self) -> None:
        self.http.close()

    def progress(self) -> Progress:
        answer = self.http.get(f"/models/{self.model}")
        answer.raise_for_status()
        info = answer.json()
        return Progress(info["global_step"], info["features_tracked"], info["stream_lag"])

    def delete(self) -> None:
        """``DELETE /models/{name}``: the service's own model starts again empty."""
        self.http.delete(f"/models/{self.model}").raise_for_status()

    def learn(self, body: bytes) -> None:
        answer = self.http.post("/learn", content=body, headers=JSON)
        if answer.status_code != 202:
            raise RuntimeError(f"/learn answered {answer.status_code}: {answer.text[:500]}")

    def wait_for_step(self, target: int, check: Callable[[], None]) -> float:
        """Poll until the model has learned ``target`` examples; when (``perf_counter``).

        ``check`` runs at every poll (to raise if a process died); ``RuntimeError`` if the
        step stands still for :data:`STALL_S`.
        """
        last, moved = -1, time.monotonic()
        while (step := self.progress().step) < target:
            check()
            now = time.monotonic()
            if step != last:
                last, moved = step, now
            elif now - moved > STALL_S:
                raise RuntimeError(f"the step stayed at {step} of {target} for {STALL_S:g}s")
            time.sleep(POLL_S)
        return time.perf_counter()

    def wait_for_lag(self, most: int, check: Callable[[], None]) -> None:
        """Poll until at most ``most`` accepted bodies are waiting for the workers."""
        while self.progress().lag > most:
            check()
            time.sleep(POLL_S)

    def learn_all(self, bodies: Sequence[bytes], count: int, check: Callable[[], None]) -> float:
        """Post ``count`` bodies (cycling), then wait until they are learned: the seconds from
        the first post until then."""
        target = self.progress().step + count * _examples(bodies[0])
        started = time.perf_counter()
        for body in islice(cycle(bodies), count):
            self.learn(body)
        return self.wait_for_step(target, check) - started

    def fill(
        self,
        target: int,
        factory: UniqueFeatures,
        check: Callable[[], None],
        per_body: int = BODY_EXAMPLES,
    ) -> Fill:
        """Post new features in bodies of ``per_body`` examples until the model tracks
        ``target``, keeping the workers' backlog short so that the stream does not grow
        without bound; timed from the first post until all are learned."""
        first = self.progress()
        started, now = time.perf_counter(), first
        for _ in range(3):  # one round unless some feature was not tracked
            missing = math.ceil((target - now.tracked) / factory.per_example)
            if missing <= 0:
                break
            for start in range(0, missing, per_body):
                self.learn(factory.body(min(per_body, missing - start)))
                self.wait_for_lag(MAX_LAG_ENTRIES, check)
            self.wait_for_step(now.step + missing, check)
            now = self.progress()
        if now.tracked < target:
            raise RuntimeError(f"the model tracks {now.tracked} features, wanted {target}")
        return Fill(now.tracked - first.tracked, time.perf_counter() - started)


JSON = {"Content-Type": "application/json"}


def _examples(body: bytes) -> int:
    return len(json.loads(body)["examples"])
