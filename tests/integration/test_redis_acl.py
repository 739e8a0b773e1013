"""The API and the workers as the least-privileged Redis users ``online-ctr redis-acl`` prints:
they learn and serve end to end, the API's user is refused what it must never do, and a
missing permission is one line naming the command and the user."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError

from online_ctr.learning.readers import read_examples
from online_ctr.store.api_keys import ApiKeyStore, digest
from online_ctr.store.keys import ApiKeyKeys, ModelKeys
from testkit.paths import CRITEO, ROOT
from tests.integration.conftest import Service, wait_until

ROWS = list(itertools.islice(read_examples(CRITEO, "criteo"), 40))
PASSWORDS = {"api": "api-secret-1", "worker": "worker-secret-2"}


@dataclass
class Users:
    """The URLs of the API's and the worker's Redis users, and an admin client."""

    api_url: str
    worker_url: str
    admin_url: str
    admin: redis.Redis

    def acl_log(self) -> list[dict[str, Any]]:
        """What Redis refused since the users were made: who, which command or key."""
        return [
            {name: entry[name] for name in ("username", "context", "reason", "object")}
            for entry in self.admin.acl_log()
        ]


def printed_rules(tmp_path: Path, *options: str) -> list[str]:
    """What the real command prints (with ``options``), as ACL SETUSER commands."""
    files = []
    for role, password in PASSWORDS.items():
        path = tmp_path / f"{role}-password"
        path.write_text(password + "\n")
        files += [f"--{role}-password-file", str(path)]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "online_ctr.cli.main",
            "redis-acl",
            "--format",
            "commands",
            *files,
            *options,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert not any(password in done.stdout for password in PASSWORDS.values())
    return done.stdout.splitlines()


@pytest.fixture
def users(redis_url: str, tmp_path: Path) -> Iterator[Users]:
    """The session Redis with the users the command prints (as its default user sets them)."""
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("ACL", "LOG", "RESET")
    for line in printed_rules(tmp_path):
        admin.execute_command(*line.split())
    host = redis_url.removeprefix("redis://")
    yield Users(
        f"redis://octr-api:{PASSWORDS['api']}@{host}",
        f"redis://octr-worker:{PASSWORDS['worker']}@{host}",
        redis_url,
        admin,
    )
    for user in ("octr-api", "octr-worker"):
        admin.execute_command("ACL", "DELUSER", user)
    admin.close()


def learn_and_predict(service: Service) -> float:
    """Learn ROWS through the API, wait for the worker, and return a prediction."""
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS]}
    reply = httpx.post(f"{service.api_url}/learn", json=body, headers={"Idempotency-Key": "k"})
    assert reply.status_code == 202, reply.text

    def learned() -> bool:
        return bool(httpx.get(f"{service.api_url}/models/default").json()["global_step"] == 40)

    wait_until(learned, what="the worker to learn 40 examples", logs=service.logs)
    predicted = httpx.post(f"{service.api_url}/predict", json={"features": ROWS[0][0]})
    assert predicted.status_code == 200, predicted.text
    return float(predicted.json()["probability"])


def test_the_api_and_the_worker_learn_and_serve_as_their_users(
    users: Users, start_service: Any
) -> None:
    service = start_service(
        users.api_url,
        worker_redis_url=users.worker_url,
        OCTR_FEATURE_NAMES="true",
        OCTR_JOIN_WINDOW_S="1",
    )
    assert learn_and_predict(service) != 0.5
    api = service.api_url
    # Joins: a label sent by prediction id (the API), the other impressions swept as
    # non-clicks when their window closes (the worker).
    for prediction_id, row in (("p1", ROWS[1]), ("p2", ROWS[2])):
        body = {"features": row[0], "prediction_id": prediction_id}
        assert httpx.post(f"{api}/predict", json=body).status_code == 200
    label = httpx.post(f"{api}/learn", json={"prediction_id": "p1", "label": 1})
    assert label.status_code == 202, label.text

    def joined() -> bool:  # 40 examples, p1's label, p2 and the first prediction swept
        return bool(httpx.get(f"{api}/models/default").json()["global_step"] == 43)

    wait_until(joined, what="the joins to be learned", logs=service.logs)
    weights = httpx.get(f"{api}/models/default/weights")
    assert weights.status_code == 200 and weights.json()["features"], weights.text
    # A model created through the API (which may not write state: its learner makes the
    # existence filters) is learned by the worker.
    assert httpx.put(f"{api}/models/b1", json={"group": "g1"}).status_code == 201
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS[:10]]}
    assert httpx.post(f"{api}/learn?model=g1", json=body).status_code == 202

    def learned() -> bool:
        return bool(httpx.get(f"{api}/models/b1").json()["global_step"] == 10)

    wait_until(learned, what="the worker to learn the group's model", logs=service.logs)
    filters = ModelKeys("b1").shard(0).filter
    assert users.admin.strlen(filters) > 0  # made by the learner
    assert httpx.post(f"{api}/predict?model=g1", json={"features": ROWS[0][0]}).status_code == 200
    # Nothing either process sent was refused, but the API's try at a new model's filters
    # (SETRANGE: it creates the default model if it starts first, and b1), which it leaves to
    # the learner.
    refused = {(e["username"], e["context"], e["reason"], e["object"]) for e in users.acl_log()}
    assert refused <= {("octr-api", "toplevel", "command", "setrange")}, refused


def test_the_api_user_may_not_flush_configure_list_or_write_state(users: Users) -> None:
    keys = ModelKeys("default")
    state = [keys.shard(0).bucket_prefix + "7", keys.shard(0).applied, keys.shard(0).filter]
    admin = users.admin
    admin.hset(state[0], "f", "v")
    api = redis.Redis.from_url(users.api_url)
    worker = redis.Redis.from_url(users.worker_url)
    try:
        for client in (api, worker):
            for command in (("FLUSHALL",), ("CONFIG", "GET", "*"), ("KEYS", "*"), ("SCAN", 0)):
                with pytest.raises(NoPermissionError):
                    client.execute_command(*command)
        writes = [
            ("HSET", state[0], "f", "w"),
            ("DEL", state[0]),
            ("SET", state[1], "9"),
            ("SETRANGE", state[2], 0, "x"),
            ("XADD", keys.redo, "*", "s0", "x"),
            ("HSET", ModelKeys("b", group="g").meta.replace(":meta", ":redo"), "f", "v"),
        ]
        for command in writes:
            with pytest.raises(NoPermissionError):
                api.execute_command(*command)
        # The API reads the state it serves; the worker writes it.
        assert api.hget(state[0], "f") == b"v"
        assert worker.hset(state[0], "f", "w") == 0
        assert api.hget(state[0], "f") == b"w"
    finally:
        api.close()
        worker.close()


def test_a_missing_permission_is_one_line_at_startup_and_a_503_later(
    users: Users, start_service: Any, tmp_path: Path
) -> None:
    users.admin.execute_command("ACL", "SETUSER", "octr-api", "-hgetall")
    started = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", "api", "--port", "0"],
        env={"OCTR_REDIS_URL": users.api_url, "PATH": "/usr/bin:/bin", "OCTR_AUTH": "off"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 1
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in started.stderr, started.stderr
    assert "HGETALL" in lines[0] and "'octr-api'" in lines[0], lines[0]
    assert PASSWORDS["api"] not in started.stderr

    users.admin.execute_command("ACL", "SETUSER", "octr-api", "+hgetall")
    service = start_service(users.api_url, worker_redis_url=users.worker_url)
    assert learn_and_predict(service) != 0.5
    users.admin.execute_command("ACL", "SETUSER", "octr-api", "-evalsha")
    reply = httpx.post(f"{service.api_url}/predict", json={"features": ROWS[1][0]})
    assert reply.status_code == 503 and "ACL rules" in reply.json()["detail"], reply.text
    log = service.logs()
    refusals = [line for line in log.splitlines() if "Redis refused" in line]
    assert refusals and "EVALSHA" in refusals[0] and "'octr-api'" in refusals[0], log
    assert "Traceback" not in log and PASSWORDS["api"] not in log
    # A learner refused a command says so in one line and tries again: nothing dead-lettered.
    users.admin.execute_command("ACL", "SETUSER", "octr-worker", "-xread")
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS[:5]]}
    users.admin.execute_command("ACL", "SETUSER", "octr-api", "+evalsha")
    assert httpx.post(f"{service.api_url}/learn", json=body).status_code == 202

    def refused_xread() -> bool:
        return "Redis refused XREAD to its user 'octr-worker'" in service.logs()

    wait_until(refused_xread, what="the worker's refusal", logs=service.logs)
    users.admin.execute_command("ACL", "SETUSER", "octr-worker", "+xread")
    wait_until(
        lambda: bool(httpx.get(f"{service.api_url}/models/default").json()["global_step"] == 45),
        what="the worker to learn once allowed again",
        logs=service.logs,
    )
    log = service.logs()
    assert "Traceback" not in log and PASSWORDS["worker"] not in log, log


def test_deleting_a_model_is_left_to_an_administrator(
    users: Users, start_service: Any, tmp_path: Path
) -> None:
    service = start_service(users.api_url, worker_redis_url=users.worker_url)
    api = service.api_url
    assert httpx.put(f"{api}/models/solo", json={}).status_code == 201
    body = {"examples": [{"features": x, "label": y} for x, y in ROWS[:10]]}
    assert httpx.post(f"{api}/learn?model=solo", json=body).status_code == 202
    wait_until(
        lambda: bool(httpx.get(f"{api}/models/solo").json()["global_step"] == 10),
        what="the worker to learn solo",
        logs=service.logs,
    )
    # The API takes the model out of the registry, and is refused its state (SCAN, UNLINK).
    deleted = httpx.delete(f"{api}/models/solo")
    assert deleted.status_code == 503 and "ACL rules" in deleted.json()["detail"], deleted.text
    assert users.admin.keys("octr:{solo/*}:*")
    # Its learner lets go at its next look at the registry, and, refused the SCAN too, leaves
    # what its last heartbeat wrote; deleting before that raced the heartbeat.
    wait_until(
        lambda: "could not remove what is left of 'solo'" in service.logs(),
        what="the learner of solo to let go",
        logs=service.logs,
    )
    # The command line as Redis's default user deletes what is left.
    done = subprocess.run(
        [sys.executable, "-m", "online_ctr.cli.main", "models", "delete", "solo", "--yes"],
        env={"OCTR_REDIS_URL": users.admin_url, "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert users.admin.keys("octr:{solo*") == []


@pytest.mark.anyio
async def test_the_api_user_adds_uses_and_revokes_managed_keys(users: Users) -> None:
    """The keys managed while the service runs are the API's to write (its admin routes
    add and revoke them, every API process records their last use); never the worker's."""
    api = aioredis.Redis.from_url(users.api_url)
    worker = aioredis.Redis.from_url(users.worker_url)
    try:
        store = ApiKeyStore(api, max_keys=10)
        found = digest("a key of the ads team")
        added = await store.add(found, ["learn:ads-*"], "ads", now_s=1_700_000_000)
        await store.touch([], [added], now_s=1_700_000_100)
        assert [record.label for record in await store.records()] == ["ads"]
        assert await store.last_used() == {added: 1_700_000_100}
        await store.revoke(added)
        assert await store.records() == []
        with pytest.raises(NoPermissionError):
            await ApiKeyStore(worker, max_keys=10).add(found, ["admin"], "w", now_s=1)
        # Only the worker's try was refused: the API's own writes all passed.
        refused = [(entry["username"], entry["object"]) for entry in users.acl_log()]
        assert refused == [("octr-worker", ApiKeyKeys.records)], refused
    finally:
        await api.aclose()
        await worker.aclose()
