"""Settings that need more than a type check: the Redis password from a file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from online_ctr.cli.embedded import RedisServer
from online_ctr.config.join_policy import JoinPolicy
from online_ctr.config.settings import Settings
from online_ctr.store.model_config import own_config
from testkit.ports import free_port
from workers.main import worker_config


def test_the_password_file_goes_into_the_url_quoted(tmp_path: Path) -> None:
    secret = tmp_path / "redis_password"
    secret.write_text("p@ss/word:1\n")  # a Compose secret file ends with a newline
    settings = Settings(redis_url="redis://user@redis:6379/2", redis_password_file=secret)
    assert settings.redis_url == "redis://user:p%40ss%2Fword%3A1@redis:6379/2"
    parsed = redis.connection.parse_url(str(settings.redis_url))
    assert (parsed["username"], parsed["password"], parsed["db"]) == ("user", "p@ss/word:1", 2)


def test_a_real_redis_accepts_the_password_from_the_file(tmp_path: Path) -> None:
    secret = tmp_path / "redis_password"
    secret.write_text("from-a-file-0123\n")
    with RedisServer(
        tmp_path / "r", port=free_port(), persist=False, password="from-a-file-0123"
    ) as server:
        url = f"redis://127.0.0.1:{server.port}/0"
        with pytest.raises(redis.AuthenticationError):
            redis.Redis.from_url(url).ping()
        settings = Settings(redis_url=url, redis_password_file=secret)
        client = redis.Redis.from_url(str(settings.redis_url))
        assert client.ping()
        client.close()


def test_an_unreadable_password_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"OCTR_REDIS_PASSWORD_FILE: cannot read .*missing"):
        Settings(redis_url="redis://redis:6379/0", redis_password_file=tmp_path / "missing")
    with pytest.raises(ValueError, match="OCTR_REDIS_PASSWORD_FILE needs OCTR_REDIS_URL"):
        Settings(redis_password_file=tmp_path / "missing")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"state_shards": 3}, "power of two up to 2048, got 3"),
        ({"state_shards": 4096}, "power of two up to 2048, got 4096"),
        ({"state_buckets": 48}, "power of two up to 16777216, got 48"),
        ({"state_buckets": 64, "state_shards": 128}, "OCTR_STATE_SHARDS (128) cannot exceed"),
    ],
)
def test_the_layout_settings_are_checked(values: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Settings(**values)


def test_the_compact_encoding_is_refused_for_rules_without_a_compact_form() -> None:
    assert Settings(state_encoding="compact", rule="l1sgd").state_encoding == "compact"
    with pytest.raises(
        ValueError,
        match=re.escape(
            "OCTR_STATE_ENCODING=compact supports OCTR_RULE ftrl and l1sgd, not 'fobos'"
        ),
    ):
        Settings(state_encoding="compact", rule="fobos")
    with pytest.raises(ValueError, match="float64"):
        Settings(state_encoding="half")


def test_the_auc_window_reaches_the_worker_within_its_bounds() -> None:
    assert worker_config(Settings()).auc_window == 100_000
    assert worker_config(Settings(auc_window=500)).auc_window == 500
    for refused in (0, 1_000_001):
        with pytest.raises(ValueError, match="auc_window"):
            Settings(auc_window=refused)


def test_the_join_policy_comes_from_two_settings() -> None:
    assert own_config(Settings()).policy() == JoinPolicy(0, "negative")
    assert own_config(Settings(join_window_s=3600, unlabeled="drop")).policy() == JoinPolicy(
        3600, "drop"
    )
    for bad in ({"join_window_s": -1}, {"join_window_s": 7 * 86_400 + 1}, {"unlabeled": "skip"}):
        with pytest.raises(ValueError, match=r"join_window_s|unlabeled"):
            Settings(**bad)  # type: ignore[arg-type]
