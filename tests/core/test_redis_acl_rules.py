"""The ACL rules of the API's and the workers' Redis users, against every key name
:mod:`online_ctr.store.keys` makes, and the command that prints them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from online_ctr.store.acl import LOG_SIDE, ROLES, writable
from online_ctr.store.keys import ApiKeyKeys, FeedbackKeys, ModelKeys, RegistryKeys, ack_barrier
from testkit.paths import ROOT

#: Names of models and groups to build keys with, some named like key suffixes.
NAMES = ("default", "ads-eu.v2", "meta", "stream", "redo", "names", "acks", "imp", "idem", "b")


def log_side(keys: ModelKeys) -> dict[str, str]:
    return {name: getattr(keys, name) for name in LOG_SIDE}


def every_model_keys() -> list[ModelKeys]:
    plain = [ModelKeys(name) for name in NAMES]
    return plain + [ModelKeys(name, group) for name in NAMES for group in ("ctr", "meta")]


def test_every_log_side_key_of_model_keys_is_classified() -> None:
    # A property of ModelKeys that names a key of the {m} tag must be in LOG_SIDE (and so get
    # a rule), or the processes would be refused it.
    names = {name for name, value in vars(ModelKeys).items() if isinstance(value, property)}
    not_keys = {"feedback", "bucket_prefix_parts", "applied_tail", "bucket_pattern"}
    assert names - not_keys == set(LOG_SIDE)


def test_the_api_writes_no_state_and_no_learner_key() -> None:
    api = ROLES["api"]
    for keys in every_model_keys():
        for index in (0, 7, 63):
            shard = keys.shard(index)
            for key in (shard.applied, shard.filter, shard.bucket_prefix + "123"):
                assert not writable(api, key), key
            assert writable(api, shard.route)  # the read scripts declare it
        written = {name for name, key in log_side(keys).items() if writable(api, key)}
        assert written == {"meta", "stream", "feature_names"}, keys


def test_the_api_writes_what_a_request_writes() -> None:
    api = ROLES["api"]
    for model, group in (("default", None), ("a", "ctr")):
        feedback = FeedbackKeys.of(model, group)
        for key in (
            feedback.idempotency("any key: 1"),
            feedback.idempotency_index,
            feedback.impression("p-1"),
            feedback.pending,
            ack_barrier(feedback.pending),
        ):
            assert writable(api, key), key
    for key in dataclasses.astuple(RegistryKeys()):
        assert writable(api, key)
    for key in (ApiKeyKeys.records, ApiKeyKeys.used, ApiKeyKeys.version):
        assert writable(api, key), key  # keys added, revoked and used through the API
        assert not writable(ROLES["worker"], key), key


def test_no_model_name_reaches_a_learner_key_through_a_feedback_pattern() -> None:
    # `~octr:{*}:imp:*` must match any impression id, and its first `*` any tag; but it needs
    # `}:imp:`, and a name has no `}`: a model named imp (or idem) keeps its log side.
    api = ROLES["api"]
    for name in ("imp", "idem", "model", "g"):
        for keys in (ModelKeys(name), ModelKeys(name, "ctr"), ModelKeys("a", name)):
            written = {n for n, key in log_side(keys).items() if writable(api, key)}
            assert written == {"meta", "stream", "feature_names"}, keys


def test_the_worker_writes_every_key_of_the_learners() -> None:
    worker = ROLES["worker"]
    for keys in every_model_keys():
        shard = keys.shard(5)
        for key in (shard.applied, shard.filter, shard.bucket_prefix + "5", shard.route):
            assert writable(worker, key)
        for name, key in log_side(keys).items():
            assert writable(worker, key) == (name != "feature_names"), key
        assert writable(worker, keys.feedback.impression("x"))
        assert not writable(worker, keys.feedback.idempotency("x"))


def test_no_user_may_run_what_no_process_needs() -> None:
    for role in ROLES.values():
        rules = role.rules(cluster=True)
        assert rules[0] == "-@all" and not any(rule.startswith("+@") for rule in rules)
        for command in ("flushall", "flushdb", "config", "keys", "scan", "debug", "acl"):
            assert not any(rule.split("|")[0] == f"+{command}" for rule in rules), command
    assert "+cluster|slots" in ROLES["api"].rules(cluster=True)
    assert "+cluster|slots" not in ROLES["api"].rules()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", "redis-acl", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )


@pytest.fixture
def password_files(tmp_path: Path) -> list[str]:
    (tmp_path / "api").write_text("api-password\n")
    (tmp_path / "worker").write_text("worker-password")
    return ["--api-password-file", str(tmp_path / "api"), "--worker-password-file",
            str(tmp_path / "worker")]  # fmt: skip


def test_the_command_prints_one_rule_per_user_without_a_password(password_files: list[str]) -> None:
    aclfile = run(*password_files)
    assert aclfile.returncode == 0, aclfile.stderr
    api, worker = aclfile.stdout.splitlines()
    assert api.startswith("user octr-api reset on #") and " ~octr:{*}:stream " in api
    assert worker.startswith("user octr-worker reset on #")
    assert "password" not in aclfile.stdout
    commands = run(*password_files, "--format", "commands", "--api-user", "front")
    assert commands.stdout.splitlines()[0].startswith("ACL SETUSER front reset on #")


def test_a_missing_password_is_one_line(password_files: list[str], tmp_path: Path) -> None:
    (tmp_path / "worker").write_text("\n")
    empty = run(*password_files)
    assert empty.returncode == 1 and empty.stderr.count("\n") == 1
    assert "--worker-password-file" in empty.stderr and "empty" in empty.stderr
    same = run(*password_files, "--api-user", "x", "--worker-user", "x")
    assert same.returncode == 1 and "must differ" in same.stderr
