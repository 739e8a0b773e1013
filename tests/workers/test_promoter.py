"""Groups that promote their own challengers: feedback sent through the real app, learned by
the real fleet, paired and tallied by the group's promoter; a planted better challenger is
promoted (logged, counted, listed, undoable), identical models never are."""

from __future__ import annotations

import itertools
import json
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.promotion import Paired
from online_ctr.learning.readers import read_examples
from online_ctr.metrics import Metrics
from online_ctr.store.keys import ModelKeys
from online_ctr.store.model_config import ModelConfig, PolicyBody
from online_ctr.store.promotion import PromoterState, Promotions
from online_ctr.store.registry import Registry, UnknownNameError
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS
from workers import promoter
from workers.fleet import Fleet
from workers.learner_loop import WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.anyio

LAYOUT = {"numeric": "raw", "state_buckets": 64, "state_shards": 8, "group": "ctr"}
POLICY = {"margin": 0.001, "confidence": 0.95, "min_examples": 200, "planned_units": 500}


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, state_shards=8, **AUTH)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings, CollectorRegistry())
    with TestClient(app, headers=HEADERS) as client:
        yield client


def make_fleet(redis: Any, settings: Settings, metrics: Metrics) -> Fleet:
    config = WorkerConfig(name="w1", batch_size=256)
    registry = Registry(redis, settings.max_models)
    return Fleet(redis, registry, config, metrics, own=settings.model)


def send(client: TestClient, rows: list[tuple[dict[str, Any], int]], per_call: int) -> None:
    for start in range(0, len(rows), per_call):
        chunk = rows[start : start + per_call]
        body = {"examples": [{"features": x, "label": y} for x, y in chunk]}
        assert client.post("/learn", json=body, params={"model": "ctr"}).status_code == 202


def criteo(rows: int, skip: int = 0) -> list[tuple[dict[str, Any], int]]:
    return list(itertools.islice(read_examples(CRITEO, "criteo"), skip, skip + rows))


def create(client: TestClient, models: dict[str, dict[str, Any]]) -> None:
    for name, config in models.items():
        assert client.put(f"/models/{name}", json={**config, **LAYOUT}).status_code == 201
    answer = client.put("/groups/ctr/promotion", json=POLICY)
    assert answer.status_code == 200, answer.text
    assert answer.json()["promotion"] == POLICY


async def test_a_better_challenger_is_promoted_logged_counted_and_undoable(
    client: TestClient, settings: Settings, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The champion barely learns (alpha 0.001): the challenger's log loss is far lower.
    create(client, {"champion": {"alpha": 0.001}, "challenger": {"alpha": 0.1}})
    send(client, criteo(1_200), per_call=4)
    metrics = Metrics(CollectorRegistry())
    redis = aioredis.Redis.from_url(redis_url)
    try:
        learners = make_fleet(redis, settings, metrics)
        with caplog.at_level(logging.INFO, logger="workers.promoter"):
            await learners.run_until_idle()
        group = client.get("/groups/ctr").json()
        assert group["serving"] == "challenger"
        [promotion] = group["promotions"]
        assert promotion["promoted"] == "challenger" and promotion["replaced"] == "champion"
        assert promotion["paired_examples"] == 1_200  # every /learn call paired
        assert promotion["challenger_logloss"] < promotion["champion_logloss"]
        assert metrics.promotions.labels("ctr")._value.get() == 1
        assert "promoted 'challenger' over 'champion'" in caplog.text
        # The tallies restarted against the new serving model; its units were read.
        assert [s["paired_examples"] for s in group["challengers"]] == [0]
        assert await redis.xlen(ModelKeys("champion", "ctr").units) <= 1

        # Undone with the promote call: the tallies restart against the champion again.
        assert client.put("/groups/ctr", json={"serving": "champion"}).status_code == 200
        send(client, criteo(100, skip=1_200), per_call=4)
        await learners.run_until_idle()
        group = client.get("/groups/ctr").json()
        assert group["serving"] == "champion"  # 100 examples are below min_examples
        [standing] = group["challengers"]
        assert standing["model"] == "challenger" and standing["paired_examples"] == 100
    finally:
        await redis.aclose()


async def test_identical_models_are_never_promoted(
    client: TestClient, settings: Settings, redis_url: str
) -> None:
    create(client, {"a": {"alpha": 0.1}, "b": {"alpha": 0.1}})
    send(client, criteo(1_000), per_call=2)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        await make_fleet(redis, settings, Metrics(CollectorRegistry())).run_until_idle()
        group = client.get("/groups/ctr").json()
        assert group["serving"] == "a" and group["promotions"] == []
        [standing] = group["challengers"]
        assert standing["paired_examples"] == 1_000
        assert standing["relative_gain"] == 0.0 and standing["lower_bound"] < 0
    finally:
        await redis.aclose()


async def test_without_a_policy_nothing_is_recorded(
    client: TestClient, settings: Settings, redis_url: str
) -> None:
    for name in ("a", "b"):
        assert client.put(f"/models/{name}", json=LAYOUT).status_code == 201
    send(client, criteo(50), per_call=5)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        await make_fleet(redis, settings, Metrics(CollectorRegistry())).run_until_idle()
        assert await redis.exists(ModelKeys("a", "ctr").units, ModelKeys("b", "ctr").units) == 0
        group = client.get("/groups/ctr").json()
        assert group["promotion"] is None and group["challengers"] == []
    finally:
        await redis.aclose()


async def test_a_promotion_is_a_compare_and_set_that_keeps_the_split(redis_url: str) -> None:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        registry = Registry(redis, 10)
        for name in ("a", "b"):
            await registry.create(name, ModelConfig(group="g"))
        await registry.serve("g", "a", {"a": 0.9, "b": 0.1})
        promotions = Promotions(redis)
        await promotions.set_policy("g", PolicyBody())
        raw, state = await promotions.state("g")
        assert (raw, state) == ("", None)
        first = PromoterState("a", {"a": "1-0"}, {"b": Paired(2, 2, 0.1, 0.0, 1.0, 0.8)})
        assert await promotions.tally("g", "", first)
        assert not await promotions.tally("g", "", first)  # another promoter wrote meanwhile
        raw, state = await promotions.state("g")
        assert state == first
        moved = await promotions.promote("g", "a", "b", "stale", PromoterState("b"), {})
        assert moved is None  # the stored state moved on: nothing changed
        assert await promotions.promote("g", "b", "a", raw, PromoterState("a"), {}) is None
        info = await promotions.promote("g", "a", "b", raw, PromoterState("b"), {"examples": 2})
        assert info is not None and info.serving == "b"
        assert info.split == {"a": 0.1, "b": 0.9}  # the promoted model took the champion's share
        assert info.promotion == PolicyBody()
        [record] = await promotions.recent("g")
        assert (record["from"], record["to"], record["examples"]) == ("a", "b", "2")
        # A new policy restarts the test.
        await promotions.set_policy("g", PolicyBody(margin=0.01))
        assert await promotions.state("g") == ("", None)
        with pytest.raises(UnknownNameError):
            await promotions.set_policy("nothing", None)
    finally:
        await redis.aclose()


async def test_the_units_a_promoter_holds_are_bounded(
    client: TestClient, settings: Settings, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A challenger whose learner is stopped: the champion's units wait for it, at most
    # MOST_PENDING_UNITS of them (the oldest dropped), and the records are trimmed as read.
    monkeypatch.setattr(promoter, "MOST_PENDING_UNITS", 50)
    create(client, {"a": {"alpha": 0.1}, "b": {"alpha": 0.1}})
    send(client, criteo(300), per_call=1)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        metrics = Metrics(CollectorRegistry())
        learners = make_fleet(redis, settings, metrics)
        learners.only = frozenset({"a", "default"})
        await learners.run_until_idle()
        [held] = learners.promoters.values()
        assert len(held.pending["a"]) == 50
        assert metrics.promoter_pending_units.labels("ctr")._value.get() == 50
        assert await redis.xlen(ModelKeys("a", "ctr").units) <= 1
    finally:
        await redis.aclose()


async def test_a_stored_policy_that_does_not_read_is_no_policy(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Written by another version, or by hand: the registry still reads, without the policy.
    redis = aioredis.Redis.from_url(redis_url)
    try:
        registry = Registry(redis, 10)
        await registry.create("a", ModelConfig(group="g"))
        raw = json.loads(await redis.hget(registry.keys.groups, "g"))
        raw["promotion"] = {"margin": 0.1, "min_examples": 9007199254741000}
        await redis.hset(registry.keys.groups, "g", json.dumps(raw))
        with caplog.at_level(logging.WARNING):
            assert (await registry.groups())["g"].promotion is None
            assert (await registry.groups())["g"].models == ("a",)
        assert caplog.text.count("promotion policy does not read") == 1
    finally:
        await redis.aclose()


async def test_a_group_whose_promoter_stops_here_leaves_the_metrics(
    client: TestClient, settings: Settings, redis_url: str
) -> None:
    """Its group's series go with the promoter (policy removed here; the same when the group
    is deleted or another process takes its serving model), so labels stay bounded."""
    create(client, {"a": {"alpha": 0.1}, "b": {"alpha": 0.1}})
    send(client, criteo(100), per_call=2)
    registry = CollectorRegistry()
    redis = aioredis.Redis.from_url(redis_url)

    def series() -> list[str]:
        return [
            sample.name
            for family in registry.collect()
            for sample in family.samples
            if sample.labels.get("group") == "ctr"
        ]

    try:
        fleet = make_fleet(redis, settings, Metrics(registry))
        await fleet.run_until_idle()
        assert "online_ctr_promotions_total" in series()
        assert "online_ctr_promoter_pending_units" in series()
        assert client.delete("/groups/ctr/promotion").status_code == 200
        await fleet.sync()
        await fleet.promote()
        assert series() == [] and fleet.promoters == {}
    finally:
        await redis.aclose()
