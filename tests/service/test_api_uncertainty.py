"""POST /predict with `uncertainty: true` against a real Redis: the values against a direct
transcription from the in-process model's state, and not one Redis command more."""

from __future__ import annotations

import asyncio
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.features import BIAS, FeatureHasher
from online_ctr.learning.model import InMemoryModel
from online_ctr.learning.rules import get_rule
from service.app import create_app
from tests.service.keys import AUTH
from tests.service.test_api_predict import ROWS, learn_with_worker, predict

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

EXAMPLES: list[dict[str, Any]] = [x for x, _ in ROWS[:20]] + [
    {"site": "never.seen", "hour": 14, "tags": ["a", "b"]}
]


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, **AUTH)


def learned(client: TestClient, settings: Settings) -> InMemoryModel:
    """Learn ROWS through the API and the worker; the in-process model that equals it."""
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    assert client.post("/learn", json=body).status_code == 202
    asyncio.run(learn_with_worker(settings))
    model = InMemoryModel(get_rule(settings.rule), settings.rule_params())
    hasher = FeatureHasher(numeric=settings.numeric)
    model.learn(hasher.batch([x for x, _ in ROWS], [y for _, y in ROWS]))
    return model


def transcribed(model: InMemoryModel, features: dict[str, Any]) -> float:
    """u(x) = sum_i x_i^2 alpha / (beta + sqrt(n_i)), feature by feature, from the model's
    rows (log-bucketed numbers are categories: x = 1)."""
    hasher = FeatureHasher(numeric="log_bucket")
    batch = hasher.batch([features])
    params = model.params
    total = []
    for feature_id, x in zip(batch.ids.tolist(), batch.values.tolist(), strict=True):
        z_n_count = model.snapshot().get(feature_id)
        n = 0.0 if z_n_count is None else float(z_n_count[1])
        total.append(x * x * params.alpha / (params.beta + math.sqrt(n)))
    return math.fsum(total)


def test_uncertainty_is_the_transcribed_formula(client: TestClient, settings: Settings) -> None:
    model = learned(client, settings)
    single = predict(client, {"features": EXAMPLES[0], "uncertainty": True})
    assert set(single) == {"probability", "logit", "uncertainty", "model", "calibrated"}
    batch = predict(client, {"examples": [{"features": x} for x in EXAMPLES], "uncertainty": True})
    got = [p["uncertainty"] for p in batch["predictions"]]
    expected = [transcribed(model, x) for x in EXAMPLES]
    # Summed in another order (bincount vs fsum): equal to a few ulps.
    assert got == pytest.approx(expected, rel=1e-13)
    assert single["uncertainty"] == got[0]
    # The never-seen example: bias (seen 300 times) plus 4 new features at alpha / beta each.
    params = model.params
    bias_n = float(model.snapshot()[FeatureHasher().id(BIAS)][1])
    fresh = 4 * params.alpha / params.beta + params.alpha / (params.beta + math.sqrt(bias_n))
    assert got[-1] == pytest.approx(fresh, rel=1e-13)
    # Seen features are surer: the same fields with values never seen are more uncertain.
    unseen = {field: f"unseen-{value}" for field, value in EXAMPLES[0].items()}
    assert predict(client, {"features": unseen, "uncertainty": True})["uncertainty"] > got[0]


def test_uncertainty_is_only_there_when_asked(client: TestClient) -> None:
    plain = predict(client, {"features": EXAMPLES[0]})
    assert "uncertainty" not in plain
    batch = predict(client, {"examples": [{"features": EXAMPLES[0]}], "uncertainty": False})
    assert "uncertainty" not in batch["predictions"][0]
    asked = predict(client, {"features": EXAMPLES[0], "uncertainty": True})
    assert (asked["probability"], asked["logit"]) == (plain["probability"], plain["logit"])


def commands(plain: redis.Redis) -> dict[str, int]:
    """Calls per Redis command since the last CONFIG RESETSTAT, from INFO commandstats."""
    stats = plain.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items()}


def test_uncertainty_costs_no_extra_redis_command(settings: Settings) -> None:
    # Auth off: no key watch polls Redis during the count (service.api.key_watch).
    settings = settings.model_copy(update={"auth": "off"})
    with TestClient(create_app(settings, CollectorRegistry())) as client:
        learned(client, settings)
        plain = redis.Redis.from_url(str(settings.redis_url))
        bodies = [{"features": x} for x in EXAMPLES] + [
            {"examples": [{"features": EXAMPLES[1]}] * 5}
        ]
        counted = {}
        for asked in (False, True):

            def send(asked: bool = asked) -> None:
                for body in bodies:
                    predict(client, {**body, "uncertainty": asked})

            counted[asked] = warm_commands(plain, send)
        plain.close()
        # No call at all: the API's copy holds these features, and Redis has told of no
        # change since its last call (online_ctr.store.change_notices).
        assert counted[True] == counted[False] == {}


def warm_commands(plain: redis.Redis, send: Callable[[], None]) -> dict[str, int]:
    """The Redis commands of ``send()`` (CONFIG's aside) once warm: sent until a round makes
    no EVALSHA (the API's change notices open in the background), up to 100 rounds."""
    for _ in range(100):
        plain.config_resetstat()
        send()
        if "cmdstat_evalsha" not in commands(plain):
            break
        time.sleep(0.02)
    plain.config_resetstat()
    send()
    return {k: v for k, v in commands(plain).items() if not k.startswith("cmdstat_config")}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"features": {"a": "b"}, "uncertainty": "yes"}, "uncertainty"),
        ({"features": {"a": "b"}, "uncertainty": 1}, "uncertainty"),
        ({"examples": [{"features": {"a": "b"}, "uncertainty": True}]}, "examples[0].uncertainty"),
    ],
)
def test_a_bad_uncertainty_flag_is_a_422_naming_it(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    reply = client.post("/predict", json=body)
    assert reply.status_code == 422, reply.text
    assert [error["field"] for error in reply.json()["errors"]] == [field]
