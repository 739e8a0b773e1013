"""Requests in progress per API key (``OCTR_MAX_REQUESTS_PER_KEY``): a 429 past it."""

from __future__ import annotations

import json

from starlette.types import Message, Scope

from service.api.auth import Authenticator, digest, presented_key


class KeyShares:
    """Requests in progress per API key, at most ``most`` each (``OCTR_MAX_REQUESTS_PER_KEY``):
    one client, however many connections it opens, cannot take every turn of the event loop
    and of Redis from the others. Held by digest, for known keys only, so the table is bounded
    by the keys known (static and stored)."""

    def __init__(self, auth: Authenticator, most: int) -> None:
        self.auth = auth
        self.most = most
        self._held: dict[bytes, int] = {}

    def take(self, scope: Scope) -> bytes | bool | None:
        """The request's key digest with its share taken (give it back with :meth:`release`),
        None for a request without a known key, False when that key has ``most`` in
        progress."""
        key = presented_key(scope)
        if key is None:
            return None
        found = digest(key)
        if found not in self.auth.keys:
            return None
        held = self._held.get(found, 0)
        if held >= self.most:
            return False
        self._held[found] = held + 1
        return found

    def release(self, found: bytes) -> None:
        held = self._held.pop(found) - 1
        if held:
            self._held[found] = held

    def refusal(self, retry_after_s: int) -> tuple[Message, Message]:
        """The 429 answer (start and body messages)."""
        detail = (
            f"this API key has {self.most} requests in progress (OCTR_MAX_REQUESTS_PER_KEY); "
            "wait for one to end, or retry after Retry-After seconds"
        )
        body = json.dumps({"detail": detail}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"retry-after", str(retry_after_s).encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        start: Message = {"type": "http.response.start", "status": 429, "headers": headers}
        return start, {"type": "http.response.body", "body": body}
