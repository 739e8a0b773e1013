"""The chaos audit tells an example learned once from one learned twice or never."""

from __future__ import annotations

import pytest
import redis

from loadtests.chaos.chaos_parts import audit
from online_ctr.learning.features import Example
from tests.workers.conftest import MakeStore, make_worker, send

pytestmark = pytest.mark.anyio


def tagged(tag: str) -> Example:
    return {"tag": tag, "C1": "68fd1e64"}


async def test_audit_counts_once_doubled_and_lost(make_store: MakeStore, redis_url: str) -> None:
    store = await make_store()
    rows = [(tagged("e0"), 1), (tagged("e1"), 0), (tagged("e1"), 0), (tagged("e2"), 1)]
    await send(store, rows, per_entry=2)
    await make_worker(store).run_until_idle()
    with redis.Redis.from_url(redis_url) as client:
        result = audit(client, {"e0", "e1", "e2", "e3"})
    assert (result.tags_once, result.tags_doubled, result.tags_lost) == (2, 1, 1)
    assert (result.t, result.stream_left, result.dead_letters) == (4, 0, 0)
