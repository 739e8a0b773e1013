"""export_model and import_model of both clients, against the real API and worker processes."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path

import pytest

from online_ctr.client import AsyncClient, Client, ClientError, ModelImported
from online_ctr.learning.snapshot_reader import Reader
from tests.client.conftest import ADMIN_KEY, PREDICT_KEY, Service
from tests.client.test_client import examples, learned


def footer_of(blob: bytes) -> tuple[int, int]:
    reader = Reader()
    reader.feed(blob)
    footer = reader.close()
    return footer.t, footer.features_tracked


def test_sync_export_and_import(
    redis_url: str, start_authed: Callable[..., Service], tmp_path: Path
) -> None:
    service = start_authed(redis_url, OCTR_STATE_BUCKETS="256")
    with Client(service.api_url, api_key=ADMIN_KEY) as client:
        client.learn_many(examples(60))
        learned(client, 60)
        size = client.export_model("default", tmp_path / "default.octr")
        blob = (tmp_path / "default.octr").read_bytes()
        assert size == len(blob) and not list(tmp_path.glob("*.partial"))
        t, tracked = footer_of(blob)
        assert t == 60 and tracked > 0

        copy = client.import_model(tmp_path / "default.octr", "copy")
        assert copy == ModelImported("copy", "ftrl", 60, tracked, copy.nonzero_weights, copy.rows)
        again = io.BytesIO()
        client.export_model("copy", again)
        assert footer_of(again.getvalue()) == (60, tracked)

        with pytest.raises(ClientError) as taken:
            client.import_model(io.BytesIO(blob), "copy")
        assert taken.value.status == 409 and "replace" in taken.value.message
        assert client.import_model(io.BytesIO(blob), "copy", replace=True).global_step == 60
        with pytest.raises(ClientError) as broken:
            client.import_model(io.BytesIO(blob[:-5]), "other")
        assert broken.value.status == 422 and "truncated" in broken.value.message
        with pytest.raises(ClientError) as missing:
            client.export_model("nothing", tmp_path / "nothing.octr")
        assert missing.value.status == 404
        assert not list(tmp_path.glob("nothing.octr*"))
    with (
        Client(service.api_url, api_key=PREDICT_KEY) as predictor,
        pytest.raises(ClientError) as no,
    ):
        predictor.export_model("default", io.BytesIO())
    assert no.value.status == 403


def test_async_export_and_import(redis_url: str, start_authed: Callable[..., Service]) -> None:
    service = start_authed(redis_url, OCTR_STATE_BUCKETS="256")

    async def run() -> tuple[int, ModelImported]:
        async with AsyncClient(service.api_url, api_key=ADMIN_KEY) as client:
            await client.learn_many(examples(40))
            while (await client.model("default")).global_step < 40:
                await asyncio.sleep(0.05)
            out = io.BytesIO()
            size = await client.export_model("default", out)
            out.seek(0)
            return size, await client.import_model(out, "copy")

    size, imported = asyncio.run(run())
    assert size > 0 and imported.name == "copy" and imported.global_step == 40
