"""The production stack, run for real: ``docker compose up`` of docker-compose.yml.

Redis, the API, two workers and Prometheus from the images deploy/images/build.sh makes with no
registry (Debian's packages, the project's wheels); Grafana has no Debian package and stays out
(its dashboard is proven against a real Prometheus by test_dashboard_prometheus.py). The stack
is driven as an operator would: secrets as files with the documented owners, the API through its
published port, the learner killed with SIGKILL, then ``down -v``.

Needs a Docker engine: where none answers and none can be started here, the module skips in one
line saying why (``make compose-test`` fails instead). Slow (images built once, then reused;
the stack up in about a minute): marked integration.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import httpx
import pytest

from testkit.ports import free_ports

pytestmark = [pytest.mark.timeout(900), pytest.mark.docker]

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "deploy" / "images"
FEEDBACK = ROOT / "examples" / "feedback.json"
#: What the test runs: every service of the file but Grafana.
SERVICES = ("redis", "api", "worker", "prometheus")
#: The users the secrets must be readable by: the API and workers run as 10001, Prometheus as
#: nobody. Compose bind-mounts a file secret with its host owner and mode.
APP_UID, NOBODY_UID = 10001, 65534
PROJECT_PREFIX = "octr-compose-test-"
#: The lease key of the default model (online_ctr.store.keys: ModelKeys("default").lease).
LEASE_KEY = "octr:{default}:lease"

T = TypeVar("T")


def run(*command: str, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {done.returncode}: {done.stderr}")
    return done


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
    """Poll ``probe`` until it returns something other than None; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.2)


def engine_or_skip() -> None:
    """A Docker engine answers, started here if this is root and dockerd is installed."""
    if shutil.which("docker") is None:
        skip("no docker CLI: sudo bash deploy/images/engine.sh installs Debian's docker.io")
    if run("docker", "info", check=False).returncode == 0:
        return
    if os.geteuid() != 0:
        skip(
            "no Docker engine answers and not root to start one: sudo bash deploy/images/engine.sh"
        )
    if shutil.which("dockerd") is None:
        skip("no Docker engine (dockerd): sudo bash deploy/images/engine.sh installs docker.io")
    started = run("bash", str(IMAGES / "engine.sh"), "--start", check=False)
    if run("docker", "info", check=False).returncode != 0:
        skip(started.stderr.strip().splitlines()[-1] if started.stderr else "dockerd did not start")


def skip(reason: str) -> NoReturn:
    """Skip, or fail where the stack must run (``make compose-test`` sets the variable)."""
    if os.environ.get("COMPOSE_TEST_REQUIRED"):
        pytest.fail(reason)
    pytest.skip(reason)


def remove_leftovers(compose: list[str]) -> None:
    """Stacks of this test whose pytest is gone (killed mid-run): their containers, volumes and
    networks would otherwise stay for good."""
    listed = run("docker", "ps", "-a", "--format", '{{ .Label "com.docker.compose.project" }}')
    for project in set(listed.stdout.split()):
        if project.startswith(PROJECT_PREFIX):
            pid = int(project.removeprefix(PROJECT_PREFIX))
            if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
                # From / by its name alone: here the repository's file would need its variables.
                subprocess.run(
                    [*compose, "-p", project, "down", "--volumes", "--remove-orphans"],
                    capture_output=True,
                    check=False,
                    cwd="/",
                )


@dataclass
class Stack:
    """One compose project of the shipped file, with its secrets and published ports."""

    compose: list[str]
    project: str
    env_files: list[Path]
    api: str
    prometheus: str
    key: str

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        files = [arg for path in self.env_files for arg in ("--env-file", str(path))]
        environment = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("OCTR_", "GRAFANA_", "PROMETHEUS_", "REDIS_", "COMPOSE_"))
        }
        return run(
            *self.compose,
            "--project-directory",
            str(ROOT),
            "-p",
            self.project,
            *files,
            *args,
            check=check,
            env=environment,
            cwd=ROOT,
        )

    def containers(self) -> list[dict[str, Any]]:
        shown = self("ps", "--all", "--format", "json").stdout
        # One JSON object per line (Compose >= 2.21); a list before.
        if shown.lstrip().startswith("["):
            listed: list[dict[str, Any]] = json.loads(shown)
            return listed
        return [json.loads(line) for line in shown.splitlines() if line.strip()]

    def lease(self) -> str:
        """The default model's lease: '<fence> <hostname>-<pid>' of the learning worker."""
        shown = self(
            "exec",
            "-T",
            "redis",
            "sh",
            "-c",
            'REDISCLI_AUTH="$(cat /run/secrets/redis_password)" redis-cli GET "$0"',
            LEASE_KEY,
        )
        return shown.stdout.strip()

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.api, headers={"Authorization": f"Bearer {self.key}"}, timeout=10
        )


def write_secret(path: Path, text: str, uid: int) -> Path:
    """A secret file as deploy/env.example says to make one: readable by its container's user
    alone (0400). Compose mounts the file itself, so its owner is what the container sees."""
    path.write_text(text)
    path.chmod(0o400)
    os.chown(path, uid, uid)
    return path


@pytest.fixture(scope="module")
def stack(compose: list[str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    engine_or_skip()
    if os.geteuid() != 0:
        skip("not root: the secrets' owners (uid 10001, nobody) cannot be set")
    remove_leftovers(compose)
    building = time.monotonic()
    built = run("bash", str(IMAGES / "build.sh"), check=False)
    print(f"\nimages ready in {time.monotonic() - building:.1f} s: {built.stderr.strip()}")
    if built.returncode != 0 and shutil.which("debootstrap") is None:
        skip("no debootstrap to build the base image: sudo bash deploy/images/engine.sh")
    if built.returncode == 3:  # Debian's packages out of reach: the machine's, not the code's
        skip(built.stderr.strip().splitlines()[-1])
    assert built.returncode == 0, built.stderr
    secrets_dir = tmp_path_factory.mktemp("compose-secrets")
    # The directory is private to root; the containers see the files, never the directory.
    key, metrics_key = secrets.token_hex(16), secrets.token_hex(16)
    api_port, prometheus_port = free_ports(2)
    # Redis reads its password and its users' rules as root; the API and the workers log in
    # as their own users, whose rules the real command prints (docs/operations/security.md).
    passwords = {
        role: write_secret(secrets_dir / f"redis-{role}-password", secrets.token_hex(16), APP_UID)
        for role in ("api", "worker")
    }
    users = run(
        sys.executable, "-m", "online_ctr.cli.main", "redis-acl",
        "--api-password-file", str(passwords["api"]),
        "--worker-password-file", str(passwords["worker"]),
        cwd=ROOT,
    ).stdout  # fmt: skip
    settings = {
        "OCTR_REDIS_PASSWORD_SECRET": write_secret(
            secrets_dir / "redis-password", secrets.token_hex(16) + "\n", 0
        ),
        "OCTR_REDIS_API_PASSWORD_SECRET": passwords["api"],
        "OCTR_REDIS_WORKER_PASSWORD_SECRET": passwords["worker"],
        "OCTR_REDIS_USERS_SECRET": write_secret(secrets_dir / "redis-users.acl", users, 0),
        "OCTR_API_KEYS_SECRET": write_secret(
            secrets_dir / "api-keys",
            f"{key} predict,learn,admin\n{metrics_key} metrics\n",
            APP_UID,
        ),
        "OCTR_METRICS_KEY_SECRET": write_secret(
            secrets_dir / "metrics-key", metrics_key + "\n", NOBODY_UID
        ),
        "GRAFANA_ADMIN_PASSWORD": "unused: grafana is not started",
        "OCTR_API_PORT": api_port,
        "PROMETHEUS_PORT": prometheus_port,
    }
    env_file = secrets_dir / "stack.env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
    stack = Stack(
        compose=compose,
        project=f"{PROJECT_PREFIX}{os.getpid()}",
        env_files=[env_file, IMAGES / "images.env"],
        api=f"http://127.0.0.1:{settings['OCTR_API_PORT']}",
        prometheus=f"http://127.0.0.1:{settings['PROMETHEUS_PORT']}",
        key=key,
    )
    started = time.monotonic()
    try:
        stack("up", "--detach", "--no-build", "--pull", "never", *SERVICES)
        wait_for("every container healthy", lambda: all_healthy(stack), 240)
        print(f"\nstack up and healthy in {time.monotonic() - started:.1f} s")
        yield stack
    finally:
        if stack.containers():
            print(stack("logs", "--no-color", "--tail", "30", check=False).stdout)
        stack("down", "--volumes", "--remove-orphans", check=False)


def all_healthy(stack: Stack) -> bool | None:
    containers = stack.containers()
    states = [container.get("Health") for container in containers]
    return True if len(containers) == 5 and states == ["healthy"] * 5 else None


def global_step(client: httpx.Client) -> int:
    answer = client.get("/models/default")
    answer.raise_for_status()
    step: int = answer.json()["global_step"]
    return step


def learn_feedback(client: httpx.Client) -> int:
    """Send examples/feedback.json once; the number of examples accepted."""
    answer = client.post(
        "/learn", content=FEEDBACK.read_bytes(), headers={"content-type": "application/json"}
    )
    assert answer.status_code == 202, answer.text
    accepted: int = answer.json()["accepted"]
    return accepted


def test_every_health_check_passes_without_grafana(stack: Stack) -> None:
    containers = stack.containers()
    assert (
        sorted(c["Service"] for c in containers) == ["api", "prometheus", "redis"] + ["worker"] * 2
    )
    assert {c["Health"] for c in containers} == {"healthy"}


def test_the_api_and_the_workers_log_in_as_their_own_redis_users(stack: Stack) -> None:
    def redis_cli(*args: str) -> str:
        auth = 'REDISCLI_AUTH="$(cat /run/secrets/redis_password)" redis-cli "$@"'
        return stack("exec", "-T", "redis", "sh", "-c", auth, "redis-cli", *args).stdout

    assert {"octr-api", "octr-worker"} <= set(
        re.findall(r" user=(\S+)", redis_cli("CLIENT", "LIST"))
    )
    rules = {line.split()[1]: line for line in redis_cli("ACL", "LIST").splitlines()}
    assert "-@all" in rules["octr-api"] and "+flushall" not in rules["octr-api"]


def test_learn_and_predict_through_the_published_port(stack: Stack) -> None:
    with stack.client() as client:
        assert (
            client.post(
                "/predict",
                json={"features": {"site": "x"}},
                headers={"Authorization": "Bearer not-a-key"},
            ).status_code
            == 401
        )
        accepted = learn_feedback(client)
        assert accepted == 1000
        wait_for(
            "the workers learn the feedback",
            lambda: True if global_step(client) >= accepted else None,
            60,
        )
        answer = client.post(
            "/predict", json={"features": {"site": "news.example", "device": "mobile", "hour": 20}}
        )
        assert answer.status_code == 200, answer.text
        assert 0 < answer.json()["probability"] < 1


def targets_up(stack: Stack) -> dict[str, int] | None:
    listed = httpx.get(f"{stack.prometheus}/api/v1/targets", timeout=5).json()
    up: dict[str, int] = {}
    for target in listed["data"]["activeTargets"]:
        if target["health"] == "up":
            up[target["labels"]["job"]] = up.get(target["labels"]["job"], 0) + 1
    return up if up.get("api") == 1 and up.get("worker") == 2 else None


def nonzero_weights_by_job(stack: Stack) -> set[str] | None:
    answer = httpx.get(
        f"{stack.prometheus}/api/v1/query",
        params={"query": 'online_ctr_nonzero_weights{model="default"}'},
        timeout=5,
    ).json()
    jobs = {series["metric"]["job"] for series in answer["data"]["result"]}
    return jobs if {"api", "worker"} <= jobs else None


def test_prometheus_scrapes_the_api_and_both_workers(stack: Stack) -> None:
    # The shipped configuration scrapes every 15 s and re-resolves the workers as often.
    assert wait_for("targets api and 2 workers up", lambda: targets_up(stack), 90)
    # The learner reports the model's weights, and the API (to the metrics key) too.
    assert wait_for("online_ctr_nonzero_weights", lambda: nonzero_weights_by_job(stack), 90)


def learner(stack: Stack) -> tuple[str, str]:
    """The learning worker: (its container's id, the lease's holder)."""
    holder = stack.lease().split(" ", 1)[1]
    hostname = holder.rsplit("-", 1)[0]
    for container in stack.containers():
        if container["Service"] == "worker" and container["ID"].startswith(hostname):
            return container["ID"], holder
    raise AssertionError(f"the lease's holder {holder!r} is no worker container")


def new_holder(stack: Stack, old: str) -> str | None:
    """The lease once another worker holds it (None while it is the old one's or free)."""
    lease = stack.lease()
    return lease if lease and old not in lease else None


def test_the_standby_takes_over_when_the_learner_is_killed(stack: Stack) -> None:
    container, holder = learner(stack)
    with stack.client() as client:
        before = global_step(client)
        killed = time.monotonic()
        run("docker", "kill", "--signal", "KILL", container)
        taken = wait_for("the standby takes the lease", lambda: new_holder(stack, holder), 60)
        print(f"\nlease taken over {time.monotonic() - killed:.1f} s after SIGKILL: {taken}")
        assert learn_feedback(client) == 1000
        wait_for(
            "learning goes on (global_step advances)",
            lambda: True if global_step(client) >= before + 1000 else None,
            60,
        )
    # The killed one stays down (`docker kill` is a manual stop for the restart policy): the
    # learning went on in the other container, which now holds the lease.
    workers = {c["ID"]: c["State"] for c in stack.containers() if c["Service"] == "worker"}
    assert workers.pop(container) == "exited"
    (survivor,) = workers
    assert workers[survivor] == "running"
    assert learner(stack)[0] == survivor


def test_down_leaves_nothing(stack: Stack) -> None:
    stack("down", "--volumes", "--remove-orphans")
    label = f"label=com.docker.compose.project={stack.project}"
    for kind in ("container", "volume", "network"):
        left = run(
            "docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", label
        )
        assert left.stdout.split() == [], f"{kind}s left: {left.stdout}"
