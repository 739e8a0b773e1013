"""``online-ctr export NAME FILE`` and ``online-ctr import FILE NAME``, run as commands."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import Settings
from online_ctr.learning.readers import read_examples
from online_ctr.metrics import Metrics
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec
from testkit.paths import CRITEO
from tests.service.test_commands import ROOT, assert_one_line
from tests.service.test_snapshot_refusals import keys_of
from tests.workers.conftest import scan_state, send
from workers.learner_loop import Worker, WorkerConfig

pytestmark = pytest.mark.processes


def online_ctr(*argv: str, cwd: Path, **env: str) -> tuple[int, str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.update(PYTHONPATH=str(ROOT), **env)
    done = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", *argv],
        env=environment,
        capture_output=True,
        timeout=60,
        cwd=cwd,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def learned_store(redis_url: str, name: str) -> dict[int, object]:
    client = aioredis.Redis.from_url(redis_url)
    settings = Settings(redis_url=redis_url, model=name, rule="fobos", state_buckets=1024)
    store = ModelStore(client, model_spec(settings))
    await store.ensure()
    rows = list(read_examples(CRITEO, "criteo", 400))
    await send(store, rows, per_entry=20)
    await Worker(store, WorkerConfig(name="w"), Metrics(CollectorRegistry())).run_until_idle()
    state = await scan_state(store)
    await client.aclose()
    return state  # type: ignore[return-value]


async def stored(redis_url: str, name: str) -> dict[int, object]:
    client = aioredis.Redis.from_url(redis_url)
    settings = Settings(
        redis_url=redis_url, model=name, rule="fobos", state_buckets=128, state_shards=2
    )
    store = ModelStore(client, model_spec(settings))
    state = await scan_state(store)
    await client.aclose()
    return state  # type: ignore[return-value]


def test_export_then_import_round_trips(redis_url: str, tmp_path: Path) -> None:
    original = asyncio.run(learned_store(redis_url, "first"))
    status, _, stderr = online_ctr(
        "export", "first", "first.octr", "--redis-url", redis_url, cwd=tmp_path
    )
    assert status == 0, stderr
    assert (tmp_path / "first.octr").stat().st_size > 0
    assert not list(tmp_path.glob("*.partial"))
    env = {"OCTR_REDIS_URL": redis_url, "OCTR_STATE_BUCKETS": "128", "OCTR_STATE_SHARDS": "2"}
    status, out, stderr = online_ctr("import", "first.octr", "second", cwd=tmp_path, **env)
    assert status == 0, stderr
    assert "as model 'second': rule fobos, step 400" in out
    copy = asyncio.run(stored(redis_url, "second"))
    assert copy.keys() == original.keys()
    assert all((copy[k] == original[k]).all() for k in copy)  # type: ignore[attr-defined]

    again = online_ctr("import", "first.octr", "second", cwd=tmp_path, **env)
    assert_one_line((again[0], again[2]), "model 'second' exists", "replace")
    replaced = online_ctr("import", "first.octr", "second", "--replace", cwd=tmp_path, **env)
    assert replaced[0] == 0, replaced[2]


def test_failures_are_one_line(redis_url: str, tmp_path: Path) -> None:
    env = {"OCTR_REDIS_URL": redis_url}
    missing = online_ctr("export", "nothing", "x.octr", cwd=tmp_path, **env)
    assert_one_line((missing[0], missing[2]), "no model 'nothing'")
    assert not (tmp_path / "x.octr").exists() and not list(tmp_path.glob("*.partial"))
    (tmp_path / "bad.octr").write_bytes(b"OCTRSNAP\x01\x00\x00\x00H")
    bad = online_ctr("import", "bad.octr", "m", cwd=tmp_path, **env)
    assert_one_line((bad[0], bad[2]), "truncated")
    absent = online_ctr("import", "absent.octr", "m", cwd=tmp_path, **env)
    assert_one_line((absent[0], absent[2]), "absent.octr")
    no_url = online_ctr("export", "m", "x.octr", cwd=tmp_path)
    assert_one_line((no_url[0], no_url[2]), "OCTR_REDIS_URL")
    bad_url = online_ctr("export", "m", "x.octr", "--redis-url", "http://x", cwd=tmp_path)
    assert_one_line((bad_url[0], bad_url[2]), "--redis-url (OCTR_REDIS_URL)")
    bad_name = online_ctr("import", "bad.octr", "no/slash", cwd=tmp_path, **env)
    assert_one_line((bad_name[0], bad_name[2]), "invalid model name")


def test_an_import_refused_at_the_model_limit_leaves_no_key(redis_url: str, tmp_path: Path) -> None:
    # Issue 31: `online-ctr import` wrote the whole model before the registry refused it.
    asyncio.run(learned_store(redis_url, "limited"))
    exported = online_ctr("export", "limited", "m.octr", "--redis-url", redis_url, cwd=tmp_path)
    assert exported[0] == 0, exported[2]
    env = {"OCTR_REDIS_URL": redis_url, "OCTR_MAX_MODELS": "1"}
    first = online_ctr("import", "m.octr", "only", cwd=tmp_path, **env)
    assert first[0] == 0, first[2]
    refused = online_ctr("import", "m.octr", "one-too-many", cwd=tmp_path, **env)
    assert_one_line((refused[0], refused[2]), "most models (1, OCTR_MAX_MODELS)")
    assert keys_of(redis_url, "one-too-many") == []
