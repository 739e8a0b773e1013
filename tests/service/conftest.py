"""The app under test: each module defines its own ``settings`` fixture; these build the rest."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from service.app import create_app
from tests.service.keys import HEADERS

with warnings.catch_warnings():
    # Starlette would rather have the httpx2 package; the installed httpx works the same.
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


@pytest.fixture
def registry() -> CollectorRegistry:
    """A private metrics registry for the app."""
    return CollectorRegistry()


@pytest.fixture
def client(settings: Settings, registry: CollectorRegistry) -> Iterator[TestClient]:
    """The real app, lifespan included, on the test's settings."""
    with TestClient(create_app(settings, registry), headers=HEADERS) as client:
        yield client


@pytest.fixture
def plain(redis_url: str) -> Iterator[Any]:
    """A synchronous client of the test's Redis, for looking at what the app stored."""
    client: Any = redis.Redis.from_url(redis_url)
    yield client
    client.close()
