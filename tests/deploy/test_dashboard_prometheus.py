"""Every PromQL expression of the Grafana dashboard returns data from a real Prometheus.

Starts a private Redis, the real ``online-ctr api`` (API keys on) and two ``online-ctr worker``
replicas, and Prometheus with the shipped configuration pointed at them on loopback, scraping the
API with a key of the ``metrics`` scope as the compose stack does. The API runs with small
bounds (:mod:`tests.deploy.bounds`), which traffic reaches once, so the Limits row's counters of
drops and refusals exist; then learn, predict and invalid traffic runs until every dashboard
query answers with finite values, or a deadline passes.
"""

from __future__ import annotations

import copy
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
import yaml

from testkit.ports import free_ports
from tests.deploy.bounds import JOINS, REACHED, REDIS_MAXMEMORY, SMALL_BOUNDS, drive_to_the_bounds
from tests.deploy.conftest import with_metrics_key_file

pytestmark = pytest.mark.processes

ONLINE_CTR = Path(sys.executable).with_name("online-ctr")
STARTUP_DEADLINE_S = 60.0
DATA_DEADLINE_S = 120.0
POLL_S = 0.25
SITES = ("news", "sports", "video", "shop", "mail")
DEVICES = ("phone", "tablet", "desktop")
#: The test's API keys: a client's, and the one Prometheus scrapes the API with.
CLIENT_KEY = "client-key-of-the-dashboard-test"
METRICS_KEY = "metrics-key-of-the-dashboard-test"


@dataclass
class Processes:
    """Child processes with their output in log files; all stopped at teardown."""

    directory: Path
    running: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = field(default_factory=list)

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = (self.directory / f"{name}.log").open("wb")
        process = subprocess.Popen(
            argv, cwd=self.directory, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        self.running.append((name, process, log))

    def check_alive(self) -> None:
        for name, process, _ in self.running:
            if process.poll() is not None:
                raise AssertionError(f"{name} exited with {process.returncode}\n{self.logs()}")

    def logs(self) -> str:
        """The last lines each process wrote, for failure messages."""
        tails = []
        for name, _, _ in self.running:
            lines = (self.directory / f"{name}.log").read_text(errors="replace").splitlines()
            tails.append(f"--- {name} ---\n" + "\n".join(lines[-30:]))
        return "\n".join(tails)

    def stop(self) -> None:
        for _, process, _ in reversed(self.running):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process, log in reversed(self.running):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def wait_until(what: str, ready: Callable[[], bool], processes: Processes) -> None:
    """Poll until ``ready()`` holds, failing with the processes' logs after the deadline."""
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while not ready():
        processes.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not ready in {STARTUP_DEADLINE_S} s\n{processes.logs()}")
        time.sleep(POLL_S)


def answers(url: str) -> bool:
    """Whether a GET of the URL answers 200."""
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


def service_environment(redis_url: str, **settings: str) -> dict[str, str]:
    """This process's environment minus any online-ctr settings, plus the given ones."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("OCTR_") and name != "REDIS_URL"
    }
    return (
        environment | {"OCTR_REDIS_URL": redis_url, "OCTR_HEARTBEAT_INTERVAL_S": "0.5"} | settings
    )


def local_prometheus_config(
    shipped: dict[str, Any], targets: dict[str, list[str]]
) -> dict[str, Any]:
    """The shipped configuration, with each job's targets on loopback and 1 s scrapes."""
    config = copy.deepcopy(shipped)
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    for job in config["scrape_configs"]:
        job.pop("dns_sd_configs", None)
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
    return config


@dataclass(frozen=True)
class Stack:
    """Where the running API and Prometheus answer."""

    api_url: str
    prometheus_url: str
    redis_url: str
    processes: Processes


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="module")
def processes(workdir: Path) -> Iterator[Processes]:
    running = Processes(workdir)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def stack(
    processes: Processes,
    prometheus_binary: str,
    prometheus_config: dict[str, Any],
    workdir: Path,
) -> Stack:
    """Redis, the API, two workers and Prometheus, all ready; shared by this module's tests."""
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.skip("redis-server is not installed")
    assert ONLINE_CTR.exists(), f"{ONLINE_CTR} missing: pip install -e . into this environment"

    redis_port, api_port, prometheus_port, *worker_ports = free_ports(5)
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    # As deploy/env.example says: the key in its own file, and in the API's keys file with the
    # metrics scope.
    keys_file, metrics_key_file = workdir / "api-keys", workdir / "metrics-key"
    keys_file.write_text(f"{CLIENT_KEY} predict,learn\n{METRICS_KEY} metrics\n")
    metrics_key_file.write_text(f"{METRICS_KEY}\n")
    processes.start(
        "redis",
        [redis_server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(workdir), "--maxmemory", str(REDIS_MAXMEMORY)],
    )  # fmt: skip
    wait_until("redis", lambda: _redis_answers(redis_port), processes)

    api_url = f"http://127.0.0.1:{api_port}"
    api_settings = {"OCTR_PORT": str(api_port), "OCTR_API_KEYS_FILE": str(keys_file)}
    api_settings |= JOINS | SMALL_BOUNDS
    processes.start("api", [str(ONLINE_CTR), "api"], service_environment(redis_url, **api_settings))
    for replica, port in enumerate(worker_ports, start=1):
        settings = {"OCTR_WORKER_METRICS_PORT": str(port), "OCTR_WORKER_NAME": f"worker-{replica}"}
        settings |= JOINS
        processes.start(
            f"worker-{replica}",
            [str(ONLINE_CTR), "worker"],
            service_environment(redis_url, **settings),
        )

    prometheus_url = f"http://127.0.0.1:{prometheus_port}"
    targets = {
        "api": [f"127.0.0.1:{api_port}"],
        "worker": [f"127.0.0.1:{port}" for port in worker_ports],
        "prometheus": [f"127.0.0.1:{prometheus_port}"],
    }
    config_file = workdir / "prometheus.yml"
    config = with_metrics_key_file(prometheus_config, metrics_key_file)
    config_file.write_text(yaml.safe_dump(local_prometheus_config(config, targets)))
    processes.start(
        "prometheus",
        [prometheus_binary, f"--config.file={config_file}",
         f"--storage.tsdb.path={workdir / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
    )  # fmt: skip

    # /readyz needs Redis and a fresh worker heartbeat: the whole chain is up.
    wait_until("the API", lambda: answers(f"{api_url}/readyz"), processes)
    wait_until("prometheus", lambda: answers(f"{prometheus_url}/-/ready"), processes)
    return Stack(api_url, prometheus_url, redis_url, processes)


@pytest.fixture(scope="module")
def bounds_reached(stack: Stack) -> Stack:
    """The stack once traffic reached each of the API's bounds."""
    with api_client(stack.api_url) as api:
        drive_to_the_bounds(api, stack.redis_url)
    return stack


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def example(rng: random.Random) -> dict[str, Any]:
    """A synthetic impression: clicks are likelier on some sites and cheap items."""
    site, device = rng.choice(SITES), rng.choice(DEVICES)
    price = round(rng.uniform(0.5, 5.0), 2)
    logit = {"news": -1.0, "sports": -2.0, "video": 0.0, "shop": -0.5, "mail": -3.0}[site]
    logit += 0.5 * (device == "phone") - 0.3 * price
    label = int(rng.random() < 1.0 / (1.0 + math.exp(-logit)))
    return {"features": {"site": site, "device": device, "price": price}, "label": label}


def drive_traffic(client: httpx.Client, rng: random.Random) -> None:
    """One round: feedback, predictions and a few invalid requests (the 4xx panel's data)."""
    for _ in range(40):
        response = client.post("/learn", json=example(rng))
        assert response.status_code == 202, response.text
    for _ in range(20):
        response = client.post("/predict", json={"features": example(rng)["features"]})
        assert response.status_code == 200, response.text
    for _ in range(5):  # the group with a promotion policy (bounds.challengers)
        response = client.post("/learn", json=example(rng), params={"model": "promo"})
        assert response.status_code == 202, response.text
        features = {"features": example(rng)["features"]}
        for model in ("promo", "promo-alpha_0.1"):  # the serving model, the other by name
            response = client.post("/predict", json=features, params={"model": model})
            assert response.status_code == 200, response.text
    for _ in range(5):  # the model that admits and samples (bounds.lean_model)
        response = client.post("/learn", json=example(rng), params={"model": "lean"})
        assert response.status_code == 202, response.text
        features = {"features": example(rng)["features"]}
        response = client.post("/predict", json=features, params={"model": "lean"})
        assert response.status_code == 200, response.text
    for _ in range(2):
        response = client.post("/predict", json={"features": "not a mapping"})
        assert 400 <= response.status_code < 500, response.text


def api_client(api_url: str) -> httpx.Client:
    """A client of the API with the test's client key."""
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}
    return httpx.Client(base_url=api_url, headers=headers, timeout=10.0)


def query(client: httpx.Client, expr: str) -> list[dict[str, Any]]:
    """An instant query's result vector."""
    response = client.get("/api/v1/query", params={"query": expr})
    body = response.json()
    assert body["status"] == "success", (expr, body)
    assert body["data"]["resultType"] == "vector", (expr, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def has_data(result: list[dict[str, Any]]) -> bool:
    """Whether a panel would draw something: at least one series, every value finite."""
    return bool(result) and all(math.isfinite(float(series["value"][1])) for series in result)


def test_every_dashboard_query_returns_data(bounds_reached: Stack, queries: list[Any]) -> None:
    stack = bounds_reached
    assert queries
    rng = random.Random(20240611)
    missing = queries
    results: dict[str, list[dict[str, Any]]] = {}
    deadline = time.monotonic() + DATA_DEADLINE_S
    with (
        api_client(stack.api_url) as api,
        httpx.Client(base_url=stack.prometheus_url, timeout=10.0) as prometheus,
    ):
        while missing and time.monotonic() < deadline:
            stack.processes.check_alive()
            drive_traffic(api, rng)
            results = {q.where: query(prometheus, q.expr) for q in queries}
            missing = [q for q in queries if not has_data(results[q.where])]
            if missing:
                time.sleep(1.0)  # a scrape interval: let Prometheus see the new traffic
        up = query(prometheus, "up")
    report = "\n".join(f"{q.where}: {q.expr}\n  -> {results.get(q.where)}" for q in missing)
    assert not missing, f"dashboard queries without data:\n{report}\nup: {up}"


def test_prometheus_scrapes_the_api_and_both_workers(stack: Stack) -> None:
    with httpx.Client(base_url=stack.prometheus_url, timeout=10.0) as prometheus:
        wait_until(
            "scrapes of every target",
            lambda: len(query(prometheus, 'up{job=~"api|worker"} == 1')) == 3,
            stack.processes,
        )


def test_the_model_variable_finds_the_model(stack: Stack, dashboard: dict[str, Any]) -> None:
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "model"]
    metric = variable["query"]["query"].removeprefix("label_values(").split(",")[0]
    with (
        api_client(stack.api_url) as api,
        httpx.Client(base_url=stack.prometheus_url, timeout=10.0) as prometheus,
    ):
        drive_traffic(api, random.Random(7))

        def listed() -> bool:
            response = prometheus.get("/api/v1/label/model/values", params={"match[]": metric})
            values: list[str] = response.json()["data"]
            return "default" in values

        wait_until("the model label", listed, stack.processes)


def test_prometheus_reads_model_series_only_the_metrics_key_shows(stack: Stack) -> None:
    with (
        api_client(stack.api_url) as api,
        httpx.Client(base_url=stack.prometheus_url, timeout=10.0) as prometheus,
    ):
        drive_traffic(api, random.Random(11))
        for key in (None, CLIENT_KEY):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            shown = httpx.get(f"{stack.api_url}/metrics", headers=headers, timeout=10.0)
            assert shown.status_code == 200
            assert 'model="' not in shown.text, key
            assert "online_ctr_http_requests_total" in shown.text, key
        wait_until(
            "the API's model series in Prometheus",
            lambda: bool(query(prometheus, 'online_ctr_nonzero_weights{job="api"}')),
            stack.processes,
        )


@pytest.mark.parametrize("bound", sorted(REACHED))
def test_prometheus_sees_each_bound_reached(bounds_reached: Stack, bound: str) -> None:
    # What the Limits row shows at a bound, as Prometheus scraped it from the API.
    with httpx.Client(base_url=bounds_reached.prometheus_url, timeout=10.0) as prometheus:
        wait_until(
            f"{bound} ({REACHED[bound]})",
            lambda: bool(query(prometheus, REACHED[bound])),
            bounds_reached.processes,
        )
