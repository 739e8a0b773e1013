"""PUT /models/{name}/snapshot refuses what no model can hold, at any stage of the file, and
leaves nothing behind: no key of the model's, no registry entry, whatever was refused and
when (issue 31, parts 2 and 3)."""

from __future__ import annotations

import asyncio
import dataclasses
import warnings
import zlib
from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest
import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.snapshot import PREAMBLE, SECTION, Footer, Header, RowChunk
from online_ctr.learning.snapshot_reader import Reader
from online_ctr.learning.snapshot_writer import Writer
from online_ctr.store.keys import RegistryKeys
from online_ctr.store.registry import Registry, RegistryError
from online_ctr.store.snapshot_import import SnapshotImport
from service.app import create_app
from tests.service.keys import AUTH, HEADERS
from tests.service.test_api_snapshots import _learn, download, pieces

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)
    from fastapi.testclient import TestClient


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return Settings(redis_url=redis_url, state_buckets=64, state_shards=8, **AUTH)


@pytest.fixture
def blob(client: TestClient, settings: Settings) -> bytes:
    """A snapshot of the served model after it learned (several chunks of rows)."""
    asyncio.run(_learn(settings))
    return download(client)


def keys_of(redis_url: str, name: str) -> list[bytes]:
    """Every key of model ``name`` (log side and state), and its registry entry if any."""
    client = redis.Redis.from_url(redis_url)
    found = list(client.scan_iter(match=f"octr:{{{name}}}:*", count=1000))
    found += client.scan_iter(match=f"octr:{{{name}/*}}:*", count=1000)
    if client.hexists(RegistryKeys().models, name):
        found.append(b"registry:" + name.encode())
    client.close()
    return found


def rewritten(
    blob: bytes,
    header: Callable[[Header], Header] = lambda h: h,
    last_rows: Callable[[np.ndarray], np.ndarray] = lambda s: s,
    footer: Callable[[Footer], Footer] = lambda f: f,
) -> bytes:
    """``blob`` with its header, its last chunk's state or its footer changed; checksums right."""
    reader = Reader()
    items = reader.feed(blob)
    chunks = [item for item in items if isinstance(item, RowChunk)]
    assert len(chunks) >= 2  # so a refusal of the last one comes after rows were written
    writer = Writer()
    out = writer.start(header(items[0]))  # type: ignore[arg-type]
    for chunk in chunks[:-1]:
        out += writer.rows(chunk.ids, chunk.state)
    out += writer.rows(chunks[-1].ids, last_rows(chunks[-1].state.copy()))
    return out + writer.finish(footer(reader.close()))


def negative_n(state: np.ndarray) -> np.ndarray:
    state[-1, 1] = -1.0
    return state


def nested_header(blob: bytes) -> bytes:
    nested = b"[" * 500_000 + b"]" * 500_000
    return (
        PREAMBLE.pack(b"OCTRSNAP", 1) + SECTION.pack(b"H", len(nested), zlib.crc32(nested)) + nested
    )


CASES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "header encoding": (
        lambda b: rewritten(b, header=lambda h: dataclasses.replace(h, encoding="evil")),
        "the header's encoding 'evil' is not one of float64, compact",
    ),
    "header depth": (nested_header, "the header nests too deeply"),
    "row n < 0": (
        lambda b: rewritten(b, last_rows=negative_n),
        "which must be a sum of squared gradients, >= 0",
    ),
    "footer t -1000": (
        lambda b: rewritten(b, footer=lambda f: dataclasses.replace(f, t=-1000)),
        "the footer's t -1000 is not a step: it must be a whole number in 0..2^53",
    ),
    "footer t 2^63": (
        lambda b: rewritten(b, footer=lambda f: dataclasses.replace(f, t=2**63)),
        "the footer's t 9223372036854775808 is not a step",
    ),
    "footer t 10^30": (
        lambda b: rewritten(b, footer=lambda f: dataclasses.replace(f, t=10**30)),
        "is not a step",
    ),
    "footer NaN logloss": (
        lambda b: rewritten(
            b, footer=lambda f: dataclasses.replace(f, logloss_sum=float("nan"), logloss_text="")
        ),
        "the footer's logloss_sum nan is not a sum of log losses",
    ),
    "footer infinite logloss": (
        lambda b: rewritten(
            b, footer=lambda f: dataclasses.replace(f, logloss_sum=float("inf"), logloss_text="")
        ),
        "logloss_sum inf is not a sum of log losses",
    ),
    "checksum": (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "SHA-256 does not match"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_refused_import_is_a_422_naming_it_and_leaves_no_key(
    client: TestClient, blob: bytes, redis_url: str, case: str
) -> None:
    damage, message = CASES[case]
    answer = client.put("/models/copy/snapshot", content=pieces(damage(blob)))
    assert answer.status_code == 422, answer.text
    assert message in answer.json()["detail"]
    assert keys_of(redis_url, "copy") == []
    assert client.get("/models/copy").status_code == 404


def test_an_import_refused_at_the_model_limit_leaves_no_key(
    redis_url: str, registry: CollectorRegistry
) -> None:
    # Issue 31: each import refused at OCTR_MAX_MODELS left 129-130 keys (~6 MB) that DELETE
    # /models/<name> could not find: the limit did not bound Redis's memory.
    settings = Settings(redis_url=redis_url, state_buckets=64, state_shards=8, max_models=2, **AUTH)
    asyncio.run(_learn(settings))
    with TestClient(create_app(settings, registry), headers=HEADERS) as client:
        blob = download(client)
        assert client.put("/models/second/snapshot", content=blob).status_code == 201
        before = redis.Redis.from_url(redis_url).dbsize()
        for _ in range(3):
            refused = client.put("/models/third/snapshot", content=pieces(blob))
            assert refused.status_code == 409, refused.text
            assert "OCTR_MAX_MODELS" in refused.json()["detail"]
        assert keys_of(redis_url, "third") == []
        assert redis.Redis.from_url(redis_url).dbsize() == before
        assert client.delete("/models/third").status_code == 404


async def _import_into_a_full_registry(redis_url: str, blob: bytes) -> None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        # The registry filled by another import between the check and the end of this one.
        full = Registry(client, max_models=1)
        importer = SnapshotImport(client, "late", (64, 8), registry=full)
        with pytest.raises(RegistryError, match="OCTR_MAX_MODELS"):
            await importer.run(_aiter(blob))
    finally:
        await client.aclose()


async def _aiter(blob: bytes) -> AsyncIterator[bytes]:
    for piece in pieces(blob):
        yield piece


def test_a_model_the_registry_refuses_after_its_import_is_deleted(
    blob: bytes, redis_url: str
) -> None:
    asyncio.run(_import_into_a_full_registry(redis_url, blob))
    assert keys_of(redis_url, "late") == []
