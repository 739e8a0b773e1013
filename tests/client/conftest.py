"""The real API and worker processes with API keys, for the client to talk to."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.integration.conftest import Service, start_service, wait_until

__all__ = ["Recorder", "Service", "start_service", "wait_until"]

ADMIN_KEY = "client-admin-key-for-the-tests-0"
PREDICT_KEY = "client-predict-key-for-the-tests"
KEYS = {ADMIN_KEY: ["predict", "learn", "admin"], PREDICT_KEY: ["predict"]}


@pytest.fixture
def start_authed(start_service: Callable[..., Service]) -> Callable[..., Service]:
    """``start_service`` with authentication on and the keys above."""

    def start(redis_url: str, **settings: str) -> Service:
        keys = json.dumps(KEYS)
        return start_service(redis_url, OCTR_AUTH="on", OCTR_API_KEYS=keys, **settings)

    return start


class Recorder(httpx.HTTPTransport):
    """httpx's real network transport, noting each attempt's path, status and idempotency key
    (the client's traffic as the wire saw it; nothing is answered here)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.attempts: list[tuple[str, int, str | None]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        key = request.headers.get("idempotency-key")
        self.attempts.append((request.url.path, response.status_code, key))
        return response

    def open_connections(self) -> int:
        """Connections in the pool: one for a client whose requests reused it (keep-alive)."""
        return len(self._pool.connections)
