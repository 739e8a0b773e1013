"""The admin API and ``online-ctr models`` are one implementation (:mod:`online_ctr.admin`):
the same sequence of operations, driven through each, leaves the same keys in Redis."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import redis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from service.app import create_app
from tests.service.keys import AUTH, HEADERS
from tests.service.test_models_command import models, ok

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


#: What a group's feedback leaves under its tag (an idempotency record, the pending set).
GROUP_KEYS = ("octr:{g:ctr}:idem:k-1", "octr:{g:ctr}:pending")


def _feedback(redis_url: str) -> None:
    """Stand in for /learn on the group: the keys its feedback leaves under the group's tag."""
    plain = redis.Redis.from_url(redis_url)
    plain.set(GROUP_KEYS[0], "1")
    plain.zadd(GROUP_KEYS[1], {"p-1": 1.0})
    plain.close()


def _left(redis_url: str) -> tuple[set[bytes], dict[bytes, bytes]]:
    """Every key but the service's own model's, the registry and the API keys' (an API
    process records when each key was last used, at its own pace), and the registry's models
    but the own one: what the operations left."""
    plain = redis.Redis.from_url(redis_url)
    keys = {
        key
        for key in plain.scan_iter()
        if not key.startswith(
            (b"octr:{default}", b"octr:{default/", b"octr:{#registry}", b"octr:{#apikeys}")
        )
    }
    registry = plain.hgetall("octr:{#registry}:models")
    plain.close()
    registry.pop(b"default", None)
    return keys, registry


def _through_the_cli(redis_url: str) -> None:
    ok(models(redis_url, "create", "a", "--rule", "ftrl", "--group", "ctr"))
    ok(models(redis_url, "create", "b", "--rule", "rda", "--group", "ctr"))
    _feedback(redis_url)
    ok(models(redis_url, "promote", "ctr", "b"))
    ok(models(redis_url, "delete", "a", "--yes"))
    ok(models(redis_url, "delete", "b", "--yes"))


def _through_the_api(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, **AUTH)
    app = create_app(settings, CollectorRegistry())
    with TestClient(app, headers=HEADERS) as client:
        for name, rule in (("a", "ftrl"), ("b", "rda")):
            reply = client.put(f"/models/{name}", json={"rule": rule, "group": "ctr"})
            assert reply.status_code == 201, reply.text
        _feedback(redis_url)
        assert client.put("/groups/ctr", json={"serving": "b"}).status_code == 200
        assert client.delete("/models/a").status_code == 200
        assert client.delete("/models/b").status_code == 200


def _flush(redis_url: str) -> None:
    plain = redis.Redis.from_url(redis_url)
    plain.flushall()
    plain.close()


def test_a_group_ended_through_either_leaves_the_same_keys_and_none_of_the_group(
    redis_url: str,
) -> None:
    left: list[Any] = []
    drive: Callable[[str], None]
    for drive in (_through_the_cli, _through_the_api):
        _flush(redis_url)
        drive(redis_url)
        left.append(_left(redis_url))
    through_cli, through_api = left
    assert through_cli == through_api
    keys, registered = through_cli
    assert not [key for key in keys if key.startswith(b"octr:{g:ctr}")], keys
    assert registered == {}
