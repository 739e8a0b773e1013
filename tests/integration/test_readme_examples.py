"""The README's example requests, parsed out of the README and sent as written to the real
API and worker processes: the model learns something visible from them."""

from __future__ import annotations

import asyncio
import json
import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis.asyncio as aioredis

from online_ctr.learning.features import FeatureHasher
from online_ctr.learning.rules import get_rule
from online_ctr.store.state import ModelStore, spec_from
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Request:
    """One ``curl`` of the README: method, path and JSON body (None for a GET)."""

    method: str
    path: str
    body: Any


def readme_requests() -> list[Request]:
    """Every curl command of the README's "Using it" block, in order."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Using it\n\n```sh\n(.*?)```", text, re.S)
    assert block, "the README has a 'Using it' block"
    text = re.sub(r"\\\n", " ", block.group(1))
    # A command runs on over lines that start with a space (a quoted body spanning lines).
    commands = re.findall(r"^curl .*?(?=\n\S|\n\n|\Z)", text, re.M | re.S)
    return [parse(command) for command in commands]


def parse(line: str) -> Request:
    words = shlex.split(line, comments=True)
    method, path, body = "GET", "", None
    for index, word in enumerate(words):
        if word.startswith("-X"):
            method = word[2:]
        elif word.startswith("localhost:8000"):
            path = word.removeprefix("localhost:8000")
        elif word == "-d":
            data = words[index + 1]
            body = json.loads((ROOT / data[1:]).read_text() if data.startswith("@") else data)
    return Request(method, path, body)


def test_the_readme_parses_into_the_requests_it_shows() -> None:
    requests = readme_requests()
    assert [(r.method, r.path) for r in requests] == [
        ("POST", "/learn"),
        ("POST", "/learn"),
        ("POST", "/predict"),
        ("POST", "/predict"),
        ("GET", "/models/default"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
    ]
    assert len(requests[0].body["examples"]) == 1000


async def weights(redis_url: str, names: list[str]) -> list[float]:
    """The served model's weights of the features ``names`` (the service's defaults)."""
    client = aioredis.Redis.from_url(redis_url)
    rule = get_rule("ftrl")
    store = ModelStore(client, spec_from("default", "ftrl", rule.params(), None, 1 << 18))
    hasher = FeatureHasher()
    found = await store.weights(np.array([hasher.id(n) for n in names], dtype=np.uint64))
    await client.aclose()
    return [float(w) for w in found]


def test_the_readme_examples_learn_something_visible(redis_url: str, start_service: Any) -> None:
    service = start_service(redis_url)
    requests = readme_requests()
    learns = [r for r in requests if r.path == "/learn"]
    examples = sum(len(r.body.get("examples", [None])) for r in learns)

    def step() -> int:
        return int(httpx.get(f"{service.api_url}/models/default").json()["global_step"])

    answers = []
    for request in requests:
        if request.path != "/learn" and answers and len(answers) == len(learns):
            # The README's reader predicts once the feedback is learned; so does the test.
            wait_until(lambda: step() == examples, what="the worker to learn the feedback")
        reply = httpx.request(
            request.method, service.api_url + request.path, json=request.body, timeout=10
        )
        assert reply.status_code in (200, 202), (request, reply.text)
        answers.append(reply)
    news_evening = answers[2].json()
    assert news_evening["calibrated"] is False
    batch = answers[3].json()["predictions"]
    assert all(p["uncertainty"] > 0 for p in batch)
    # news.example in the evening is clicked 80% of the time, the rest 3%.
    assert news_evening["probability"] > 2 * max(p["probability"] for p in batch)

    info = answers[4].json()
    labels = [e["label"] for e in learns[0].body["examples"]] + [learns[1].body["label"]]
    rate = sum(labels) / len(labels)
    constant = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
    # Better than always predicting the click rate, which it could only know in hindsight.
    assert info["progressive_logloss"] < constant
    assert info["nonzero_weights"] > 0
    # The example's own features carry weight: the site, and the hour as its bucket.
    site, hour = asyncio.run(weights(redis_url, ["site=news.example", "hour=8"]))
    assert site > 0 and hour > 0
