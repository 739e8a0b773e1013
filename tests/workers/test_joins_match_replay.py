"""THE PROOF of the join: the Criteo file served as impressions through the real app, clicks
sent by prediction id after random delays (some after the window: refused as late), the rest
closed as negatives by the sweep; the worker then learns exactly the in-process replay of
(features as served, label) in stream order, every impression exactly once, and its log loss
is that of the probabilities served."""

from __future__ import annotations

import asyncio
import itertools
import random
import struct
from typing import Any

import httpx
import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import Example, FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.readers import read_examples
from online_ctr.learning.replay import replay
from online_ctr.learning.stream_metrics import log_loss
from online_ctr.metrics import Metrics
from online_ctr.store.codec import LABEL_OFFSET
from online_ctr.store.impressions import Impressions
from online_ctr.store.keys import ModelKeys
from online_ctr.store.model_config import own_config
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from tests.workers.conftest import scan_state
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.anyio

ROWS = 10_000
PER_REQUEST = 100
#: Four seconds: a late click is sent 1.1-1.35 windows after its prediction, and its tombstone
#: answers 409 until about 2 windows after it. With a 2 s window, four pytest processes on two
#: cores delayed queued clicks by more than the 1.3 s left, past the tombstone, to a rightful 404.
WINDOW_S = 4
#: Clicks sent at once (the client's Redis connection pool is bounded).
CLICKS_IN_FLIGHT = 16
KEYS = ModelKeys("default")


async def serve_and_click(
    client: httpx.AsyncClient, rows: list[tuple[Example, int]], rng: random.Random
) -> tuple[dict[str, int], dict[str, int]]:
    """Predict every row (in requests of PER_REQUEST); for each clicked row, a task sends its
    click after a random delay, up to half a window past the window. Returns the row of each
    prediction id and the status each click got."""
    row_of: dict[str, int] = {}
    answers: dict[str, int] = {}
    in_flight = asyncio.Semaphore(CLICKS_IN_FLIGHT)

    async def click(prediction_id: str, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        async with in_flight:
            body = {"prediction_id": prediction_id, "label": 1}
            reply = await client.post("/learn", json=body)
        answers[prediction_id] = reply.status_code

    tasks = []
    for start in range(0, len(rows), PER_REQUEST):
        chunk = rows[start : start + PER_REQUEST]
        body = {"examples": [{"features": features} for features, _ in chunk]}
        reply = await client.post("/predict", json=body)
        assert reply.status_code == 200, reply.text
        for offset, answer in enumerate(reply.json()["predictions"]):
            row_of[answer["prediction_id"]] = start + offset
            if chunk[offset][1] == 1:
                # Early: well inside the window. Late: after it closed, well inside the one
                # after it, while its tombstone answers 409 (a click still queued for a slot
                # in flight past that would get a 404, rightly).
                delay = WINDOW_S * rng.choice([rng.uniform(0, 0.6), rng.uniform(1.1, 1.35)])
                tasks.append(asyncio.create_task(click(answer["prediction_id"], delay)))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    return row_of, answers


async def sweep_until(redis: Any, settings: Settings, done: asyncio.Event) -> None:
    """What a worker's loop does meanwhile: sweep every 50 ms; once ``done``, until no window
    is open (each closes WINDOW_S after its prediction)."""
    impressions = Impressions(redis, KEYS.feedback, [KEYS.stream], own_config(settings).policy())
    while not done.is_set() or await redis.zcard(KEYS.feedback.pending):
        swept = await impressions.sweep()
        assert swept.expired == 0
        await asyncio.sleep(0.05)


async def test_joined_clicks_learn_exactly_the_replay(redis_url: str) -> None:
    rows = list(itertools.islice(read_examples(CRITEO, "criteo"), ROWS))
    settings = Settings(redis_url=redis_url, state_buckets=64, join_window_s=WINDOW_S, **AUTH)
    app = create_app(settings, CollectorRegistry())
    transport = httpx.ASGITransport(app=app)
    redis = aioredis.Redis.from_url(redis_url)
    done = asyncio.Event()
    sweeper = asyncio.create_task(sweep_until(redis, settings, done))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://app", headers=HEADERS) as client,
    ):
        row_of, answers = await serve_and_click(client, rows, random.Random(7))
    done.set()
    await sweeper

    learned = {i for i, status in answers.items() if status == 202}
    late = {i for i, status in answers.items() if status == 409}
    assert learned | late == set(answers)  # never unknown, never repeated
    assert learned and late
    entries = [fields for _, fields in await redis.xrange(KEYS.stream)]
    order = [fields[b"i"].decode() for fields in entries]
    assert sorted(order) == sorted(row_of)  # every impression learned exactly once
    labels = [fields[b"b"][LABEL_OFFSET] for fields in entries]
    assert labels == [int(i in learned) for i in order]

    store = ModelStore(redis, model_spec(settings))
    worker = Worker(
        store,
        WorkerConfig(name="w1"),
        Metrics(CollectorRegistry()),
        policy=own_config(settings).policy(),
    )
    await worker.run_until_idle()

    served = [(rows[row_of[i]][0], y) for i, y in zip(order, labels, strict=True)]
    model = InMemoryModel(store.spec.rule, store.spec.params)
    replay(served, model, FeatureHasher(numeric=store.spec.numeric), batch_size=1)
    stored, expected = await scan_state(store), model.snapshot()
    assert stored.keys() == expected.keys()
    for feature, row in expected.items():
        np.testing.assert_array_equal(stored[feature], row[:-1])
    info = await store.info()
    assert info.t == ROWS and info.stream_lag == 0
    p = np.array([struct.unpack("<d", fields[b"p"])[0] for fields in entries])
    served_loss = log_loss(p, np.array(labels, dtype=np.float64)).sum()
    assert info.logloss_sum == pytest.approx(served_loss, rel=1e-12)
    await redis.aclose()
