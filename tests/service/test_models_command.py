"""``online-ctr models list|create|delete|promote``, run as commands against a real Redis:
the admin routes' rules, one line and a non-zero status for every refusal."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from online_ctr.config.settings import Settings
from online_ctr.store.keys import ModelKeys, RegistryKeys
from online_ctr.store.model_config import ModelConfig, own_config
from online_ctr.store.registry import Registry, decode_config
from online_ctr.store.state import ModelStore
from online_ctr.wiring import model_spec, redis_client
from testkit.ports import free_port
from tests.service.test_commands import ROOT, assert_one_line

pytestmark = pytest.mark.processes


def models(redis_url: str | None, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``online-ctr models ARGV`` to its end against ``redis_url``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OCTR_")}
    environment.pop("REDIS_URL", None)
    environment.update(PYTHONPATH=str(ROOT), **env)
    if redis_url is not None:
        environment["OCTR_REDIS_URL"] = redis_url
    return subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", "models", *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(done: subprocess.CompletedProcess[str], status: int, *parts: str) -> None:
    assert done.returncode == status, (done.stdout, done.stderr)
    assert_one_line((done.returncode, done.stderr), *parts)


def listing(redis_url: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(ok(models(redis_url, "list", "--json")))
    return result


def model_keys(redis_url: str, name: str, group: str | None = None) -> list[bytes]:
    """The keys of the model's state shards, and its meta hash if there."""
    plain = redis.Redis.from_url(redis_url)
    meta = ModelKeys(name, group=group).meta
    keys: list[bytes] = plain.keys(f"octr:{{{name}/*") + plain.keys(meta)
    plain.close()
    return keys


def test_a_created_model_is_listed_and_deletable(redis_url: str) -> None:
    created = ok(models(redis_url, "create", "chal", "--rule", "fobos", "--alpha", "0.2"))
    assert "created model 'chal': rule fobos" in created
    again = ok(models(redis_url, "create", "chal", "--rule", "fobos", "--alpha", "0.2"))
    assert "model 'chal' exists already, alike" in again
    other = models(redis_url, "create", "chal", "--rule", "fobos", "--alpha", "0.3")
    refused(other, 1, "model 'chal' exists with another configuration: its alpha 0.2 (asked: 0.3);")
    assert listing(redis_url) == {
        "models": [{"name": "chal", "rule": "fobos", "group": None, "own": False}],
        "groups": [],
    }
    table = ok(models(redis_url, "list")).splitlines()
    assert table[0].split() == ["model", "rule", "group", "own"]
    assert table[1].split() == ["chal", "fobos", "-"]
    assert model_keys(redis_url, "chal")
    deleted = ok(models(redis_url, "delete", "chal", "--yes"))
    assert "deleted model 'chal'" in deleted
    assert listing(redis_url)["models"] == [] and model_keys(redis_url, "chal") == []
    refused(models(redis_url, "delete", "chal", "--yes"), 1, "no model 'chal'")


@pytest.mark.parametrize("admission", ["bloom:2", "bloom:2:50000"])
def test_a_model_admitting_and_sampling_is_created_with_both(
    redis_url: str, admission: str
) -> None:
    options = ("--rule", "ftrl", "--admission", admission, "--negative-rate", "0.25")
    assert "created model 'lean'" in ok(models(redis_url, "create", "lean", *options))
    stored = redis.Redis.from_url(redis_url).hget(RegistryKeys().models, "lean")
    config = ModelConfig.model_validate_json(stored)
    assert (config.admission, config.negative_rate) == (admission, 0.25)


def test_a_model_with_a_budget_is_created_with_it(redis_url: str) -> None:
    options = ("--rule", "fobos", "--max-features", "100000")
    assert "created model 'small'" in ok(models(redis_url, "create", "small", *options))
    stored = redis.Redis.from_url(redis_url).hget(RegistryKeys().models, "small")
    assert ModelConfig.model_validate_json(stored).max_features == 100_000


@pytest.mark.parametrize("base_rate", ["decay:1000", "off"])
def test_a_model_is_created_with_its_base_rate_and_without_one_has_the_mean(
    redis_url: str, base_rate: str
) -> None:
    plain = redis.Redis.from_url(redis_url)
    ok(models(redis_url, "create", "drifting", "--rule", "ftrl", "--base-rate", base_rate))
    ok(models(redis_url, "create", "plain", "--rule", "ftrl"))
    created = {
        name: decode_config(plain.hget(RegistryKeys().models, name))
        for name in ("drifting", "plain")
    }
    assert (created["drifting"].base_rate, created["plain"].base_rate) == (base_rate, "mean")
    spec = created["drifting"].spec("drifting")
    assert spec.base_rate.text == base_rate


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (("--rule", "rda", "--alpha", "0.1"), "--alpha not used by rule 'rda'"),
        (("--rule", "ftrl", "--alpha", "-1"), "--alpha must be > 0"),
        (("--rule", "nope"), "--rule: unknown rule 'nope'"),
        (("--rule", "ftrl", "--hash-bits", "70"), "--hash-bits: input should be less"),
        (("--rule", "ftrl", "--hash-bits", "many"), "--hash-bits: input should be a valid"),
        (("--rule", "ftrl", "--numeric", "cubic"), "--numeric: "),
        (("--rule", "ftrl", "--group", "a/b"), "--group: use 1-64"),
        (("--rule", "ftrl", "--join-window-s", "-1"), "--join-window-s: "),
        (("--rule", "ftrl", "--admission", "bloom:0"), "--admission: admission 'bloom:0': the"),
        (("--rule", "ftrl", "--admission", "often"), "--admission: admission 'often': use all"),
        (("--rule", "ftrl", "--admission", "bloom:2:0"), "the period D of bloom:N:D must be"),
        (("--rule", "ftrl", "--negative-rate", "0"), "--negative-rate: input should be greater"),
        (("--rule", "ftrl", "--negative-rate", "half"), "--negative-rate: input should be a"),
        (("--rule", "ftrl", "--max-features", "-2"), "--max-features: input should be greater"),
        (("--rule", "ftrl", "--base-rate", "median"), "--base-rate: the base-rate prior must be"),
        (("--rule", "ftrl", "--base-rate", "decay:0"), "'decay:H' with H a whole number"),
        (
            ("--rule", "ftrl", "--max-features", "9", "--expire-after", "9"),
            "a model has --expire-after or --max-features, not both",
        ),
    ],
)
def test_an_invalid_option_is_one_line_and_status_2(
    redis_url: str, options: tuple[str, ...], named: str
) -> None:
    refused(models(redis_url, "create", "m", *options), 2, named)
    assert model_keys(redis_url, "m") == []


def test_the_own_model_cannot_be_created_and_is_only_emptied(redis_url: str) -> None:
    refused(models(redis_url, "create", "default", "--rule", "ftrl"), 1, "own model (OCTR_MODEL)")
    settings = Settings(redis_url=redis_url, state_buckets=1024)

    async def start_service() -> None:  # what the API and the worker do at start
        client = redis_client(settings)
        await Registry(client, 10).create("default", own_config(settings), replace=True)
        await ModelStore(client, model_spec(settings)).ensure()
        await client.aclose()

    asyncio.run(start_service())
    assert listing(redis_url)["models"][0] == {
        "name": "default",
        "rule": "ftrl",
        "group": None,
        "own": True,
    }
    ok(models(redis_url, "delete", "default", "--yes"))
    assert model_keys(redis_url, "default") == []
    assert [m["name"] for m in listing(redis_url)["models"]] == ["default"]


def test_keys_of_an_unregistered_model_block_a_create_until_deleted(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, model="old", rule="fobos")

    async def old_import() -> None:
        client = redis_client(settings)
        await ModelStore(client, model_spec(settings)).ensure()
        await client.aclose()

    asyncio.run(old_import())
    refused(models(redis_url, "create", "old", "--rule", "ftrl"), 1, "old")
    assert listing(redis_url)["models"] == []  # the registry entry was rolled back
    assert "deleted model 'old'" in ok(models(redis_url, "delete", "old", "--yes"))
    ok(models(redis_url, "create", "old", "--rule", "ftrl"))


def test_promote_sets_the_serving_model_and_the_split(redis_url: str) -> None:
    for name in ("champ", "chal"):
        ok(models(redis_url, "create", name, "--rule", "ftrl", "--group", "ctr"))
    ok(models(redis_url, "create", "alone", "--rule", "ftrl"))
    promoted = ok(models(redis_url, "promote", "ctr", "chal", "--split", "champ=0.9,chal=0.1"))
    assert "group 'ctr': serving chal, split chal=0.1,champ=0.9" in promoted
    ok(models(redis_url, "promote", "ctr", "champ"))  # no --split: the split stays
    (group,) = listing(redis_url)["groups"]
    assert group["serving"] == "champ" and group["split"] == {"champ": 0.9, "chal": 0.1}
    assert group["models"] == ["champ", "chal"]
    table = ok(models(redis_url, "list"))
    assert "ctr    champ,chal  champ    chal=0.1,champ=0.9  off" in table
    ok(models(redis_url, "promote", "ctr", "champ", "--no-split"))
    assert listing(redis_url)["groups"][0]["split"] == {}
    refused(models(redis_url, "promote", "ctr", "alone"), 1, "'alone' is not in group 'ctr'")
    refused(models(redis_url, "promote", "nogroup", "champ"), 1, "no model or group 'nogroup'")
    refused(models(redis_url, "promote", "alone", "champ"), 1, "'alone' is a model, not a group")
    split = ("--split", "champ=1")
    refused(models(redis_url, "promote", "nogroup", "champ", *split), 1, "no group 'nogroup'")


@pytest.mark.parametrize("split", ["champ=0", "champ=-1", "champ=inf", "champ=nan", "champ", "=1"])
def test_a_split_needs_positive_finite_weights(redis_url: str, split: str) -> None:
    refused(models(redis_url, "promote", "ctr", "champ", "--split", split), 2, "--split")


def test_deleting_refuses_a_serving_model_and_a_group(redis_url: str) -> None:
    for name in ("champ", "chal"):
        ok(models(redis_url, "create", name, "--rule", "ftrl", "--group", "ctr"))
    refused(models(redis_url, "delete", "champ", "--yes"), 1, "model 'champ' serves group 'ctr'")
    refused(models(redis_url, "delete", "ctr", "--yes"), 1, "'ctr' is a group")
    assert model_keys(redis_url, "champ", "ctr")
    ok(models(redis_url, "delete", "chal", "--yes"))
    assert model_keys(redis_url, "chal", "ctr") == []
    ok(models(redis_url, "delete", "champ", "--yes"))  # the last model ends the group
    assert listing(redis_url) == {"models": [], "groups": []}
    assert model_keys(redis_url, "champ", "ctr") == []


def test_without_a_reachable_redis_each_subcommand_says_so(tmp_path: Path) -> None:
    # A data directory where no serve ever ran: no Redis to find by itself.
    refused(models(None, "list", OCTR_DATA_DIR=str(tmp_path)), 1, "set OCTR_REDIS_URL")
    url = f"redis://127.0.0.1:{free_port()}/0"
    for argv in (
        ("list",),
        ("create", "m", "--rule", "ftrl"),
        ("delete", "m", "--yes"),
        ("promote", "g", "m"),
    ):
        refused(models(url, *argv), 1, "Redis error", "OCTR_REDIS_URL")
