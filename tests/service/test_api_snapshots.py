"""GET and PUT /models/{name}/snapshot: streaming export and import, scopes and refusals."""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Iterator

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.readers import read_examples
from online_ctr.learning.snapshot import RowChunk
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.metrics import Metrics
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from service.app import create_app
from testkit.paths import CRITEO
from tests.service.keys import AUTH, HEADERS, PREDICT_KEY
from tests.workers.conftest import send
from workers.learner_loop import Worker, WorkerConfig

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 300))


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, state_shards=8, **AUTH)


async def _learn(settings: Settings) -> None:
    client = aioredis.Redis.from_url(str(settings.redis_url))
    store = ModelStore(client, model_spec(settings))
    await store.ensure()
    await send(store, ROWS, per_entry=10)
    await Worker(store, WorkerConfig(name="w1"), Metrics(CollectorRegistry())).run_until_idle()
    await client.aclose()


@pytest.fixture
def learned(client: TestClient, settings: Settings) -> TestClient:
    """The app, its model having learned ROWS."""
    asyncio.run(_learn(settings))
    return client


def download(client: TestClient, name: str = "default") -> bytes:
    with client.stream("GET", f"/models/{name}/snapshot") as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "application/vnd.online-ctr.snapshot"
        pieces = list(response.iter_raw())
    # Streamed: the header, a chunk of rows per group of buckets read, then the footer.
    assert len(pieces) >= 3
    return b"".join(pieces)


def pieces(blob: bytes, size: int = 4096) -> Iterator[bytes]:
    for first in range(0, len(blob), size):
        yield blob[first : first + size]


def test_export_then_import_under_another_name(learned: TestClient) -> None:
    blob = download(learned)
    reader = Reader()
    rows = sum(len(item.ids) for item in reader.feed(blob) if isinstance(item, RowChunk))
    footer = reader.close()
    assert footer.t == len(ROWS) and rows >= footer.features_tracked > 0

    answer = learned.put("/models/copy/snapshot", content=pieces(blob))  # chunked upload
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["name"] == "copy" and body["global_step"] == len(ROWS)
    assert body["features_tracked"] == footer.features_tracked
    assert body["nonzero_weights"] == footer.nonzero_weights
    again = Reader()
    again.feed(download(learned, "copy"))
    assert again.close().features_tracked == footer.features_tracked


def test_a_taken_name_is_a_409_unless_replace(learned: TestClient) -> None:
    blob = download(learned)
    assert learned.put("/models/copy/snapshot", content=blob).status_code == 201
    taken = learned.put("/models/copy/snapshot", content=blob)
    assert taken.status_code == 409
    assert "'copy' exists" in taken.json()["detail"] and "replace" in taken.json()["detail"]
    replaced = learned.put("/models/copy/snapshot", params={"replace": "true"}, content=blob)
    assert replaced.status_code == 201
    # The served model itself, replaced by its own snapshot: same spec, so allowed.
    assert learned.put("/models/default/snapshot?replace=true", content=blob).status_code == 201
    assert learned.get("/models/default").json()["global_step"] == len(ROWS)


def test_the_served_name_needs_the_served_spec(learned: TestClient, redis_url: str) -> None:
    other = Settings(redis_url=redis_url, model="other", rule="rda", state_buckets=64, **AUTH)
    asyncio.run(_learn(other))
    blob = download(learned, "other")
    refused = learned.put("/models/default/snapshot?replace=true", content=blob)
    assert refused.status_code == 409
    assert "OCTR_RULE=rda (served: ftrl)" in refused.json()["detail"]
    assert learned.get("/models/default").json()["global_step"] == len(ROWS)  # untouched


def test_unknown_model_and_bad_names(client: TestClient) -> None:
    missing = client.get("/models/nothing/snapshot")
    assert missing.status_code == 404 and "no model 'nothing'" in missing.json()["detail"]
    assert client.get("/models/-bad/snapshot").status_code == 422


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda blob: blob[: len(blob) // 2], "truncated"),
        (lambda blob: blob[:-1], "truncated"),
        (lambda blob: blob[:100] + bytes([blob[100] ^ 1]) + blob[101:], "corrupt"),
        (lambda blob: blob[:8] + (2).to_bytes(4, "little") + blob[12:], "version 2"),
        (lambda blob: b"PK\x03\x04" + blob[4:], "not an online-ctr snapshot"),
        (lambda blob: blob + b"x", "follow the end"),
    ],
)
def test_a_bad_file_is_a_422_naming_the_problem_and_imports_nothing(
    learned: TestClient, damage: object, message: str
) -> None:
    blob = damage(download(learned))  # type: ignore[operator]
    answer = learned.put("/models/copy/snapshot", content=blob)
    assert answer.status_code == 422 and message in answer.json()["detail"], answer.text
    assert learned.get("/models/copy/snapshot").status_code == 404


def test_snapshots_need_the_admin_scope(learned: TestClient) -> None:
    headers = {"Authorization": f"Bearer {PREDICT_KEY}"}
    refused = learned.get("/models/default/snapshot", headers=headers)
    assert refused.status_code == 403 and "admin" in refused.json()["detail"]
    assert learned.put("/models/x/snapshot", content=b"", headers=headers).status_code == 403


def test_an_upload_may_exceed_the_body_limit(redis_url: str, registry: CollectorRegistry) -> None:
    # A model larger than OCTR_MAX_BODY_BYTES goes through: snapshots are streamed.
    settings = Settings(redis_url=redis_url, state_buckets=64, max_body_bytes=1024, **AUTH)
    asyncio.run(_learn(settings))
    with TestClient(create_app(settings, registry), headers=HEADERS) as client:
        blob = download(client)
        assert len(blob) > 1024
        assert client.put("/models/big/snapshot", content=pieces(blob)).status_code == 201
        assert client.post("/predict", content=b"x" * 2048).status_code == 413


def test_the_openapi_document_describes_both_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]["/models/{name}/snapshot"]
    assert {"200", "404", "401", "403"} <= set(paths["get"]["responses"])
    assert {"201", "409", "422", "401", "403"} <= set(paths["put"]["responses"])
    assert "application/vnd.online-ctr.snapshot" in paths["put"]["requestBody"]["content"]
