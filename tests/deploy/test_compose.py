"""docker-compose.yml, as the real Compose v2 client reads it (no engine needed), and its fit
with the Prometheus configuration and the image."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from online_ctr.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
#: The variables the stack refuses to start without.
REQUIRED = {"GRAFANA_ADMIN_PASSWORD": "test-admin"}
#: Where the images come from by default (a registry); each is a variable's default.
DEFAULT_IMAGES = {
    "api": ("OCTR_IMAGE", "online-ctr:latest"),
    "worker": ("OCTR_IMAGE", "online-ctr:latest"),
    "redis": ("REDIS_IMAGE", "redis:7.2-alpine"),
    "prometheus": ("PROMETHEUS_IMAGE", "prom/prometheus:v2.53.3"),
    "grafana": ("GRAFANA_IMAGE", "grafana/grafana-oss:11.2.0"),
}


def compose_environment(**overrides: str) -> dict[str, str]:
    """This process's environment without any stack settings, plus the given ones."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("OCTR_", "GRAFANA_", "PROMETHEUS_")) and name not in REQUIRED
    }
    return environment | overrides


def run_compose(
    compose: list[str], *args: str, **variables: str
) -> subprocess.CompletedProcess[str]:
    """Run the compose client on the repository's file, with exactly these variables set.

    ``--env-file /dev/null`` keeps a developer's ``.env`` out of the test.
    """
    return subprocess.run(
        [*compose, "--project-directory", str(ROOT), "--env-file", os.devnull, *args],
        env=compose_environment(**variables),
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def stack(compose: list[str]) -> dict[str, Any]:
    """The stack, fully interpolated by the compose client."""
    shown = run_compose(compose, "config", "--format", "json", **REQUIRED)
    assert shown.returncode == 0, shown.stderr
    result: dict[str, Any] = json.loads(shown.stdout)
    return result


def test_compose_accepts_the_file(compose: list[str]) -> None:
    checked = run_compose(compose, "config", "--quiet", **REQUIRED)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_compose_refuses_to_run_without_a_secret(compose: list[str], missing: str) -> None:
    variables = {name: value for name, value in REQUIRED.items() if name != missing}
    checked = run_compose(compose, "config", "--quiet", **variables)
    assert checked.returncode != 0
    assert missing in checked.stderr


def test_every_service_has_a_health_check(stack: dict[str, Any]) -> None:
    assert set(stack["services"]) == {"redis", "api", "worker", "prometheus", "grafana"}
    for name, service in stack["services"].items():
        assert service["healthcheck"]["test"], name


def test_dependencies_wait_for_health(stack: dict[str, Any]) -> None:
    dependencies = {
        (name, dependency): condition["condition"]
        for name, service in stack["services"].items()
        for dependency, condition in service.get("depends_on", {}).items()
    }
    assert dependencies == {
        ("api", "redis"): "service_healthy",
        ("worker", "redis"): "service_healthy",
        ("grafana", "prometheus"): "service_healthy",
    }


def test_two_workers_by_default(stack: dict[str, Any]) -> None:
    assert stack["services"]["worker"]["deploy"]["replicas"] == 2


def test_redis_persists_every_second_and_never_evicts(stack: dict[str, Any]) -> None:
    redis = stack["services"]["redis"]
    command = " ".join(redis["entrypoint"] + redis["command"])
    assert "--appendonly yes" in command
    assert "--appendfsync everysec" in command
    assert "--maxmemory-policy noeviction" in command
    assert any(volume["target"] == "/data" for volume in redis["volumes"])


def test_api_and_worker_share_the_model_configuration(stack: dict[str, Any]) -> None:
    api, worker = (
        stack["services"]["api"]["environment"],
        stack["services"]["worker"]["environment"],
    )
    own = {"OCTR_HOST", "OCTR_PORT", "OCTR_API_KEYS_FILE", "OCTR_REDIS_URL"}
    model_settings = {name for name in api if name not in own | {"OCTR_REDIS_PASSWORD_FILE"}}
    assert api["OCTR_HOST"] == worker["OCTR_HOST"] == "0.0.0.0"
    assert {name: api[name] for name in model_settings} == {
        name: worker[name] for name in model_settings
    }


def test_the_api_and_the_workers_are_the_redis_users_redis_acl_prints(
    stack: dict[str, Any],
) -> None:
    # Each logs in as its own user, with the password of its own secret; Redis gets their
    # rules (`online-ctr redis-acl`, whose default user names these are) from redis_users.
    defaults = build_parser("redis-acl").parse_args(
        ["redis-acl", "--api-password-file", "a", "--worker-password-file", "w"]
    )
    for role, user in (("api", defaults.api_user), ("worker", defaults.worker_user)):
        environment = stack["services"][role]["environment"]
        assert environment["OCTR_REDIS_URL"] == f"redis://{user}@redis:6379/0"
        secret = f"redis_{role}_password"
        assert environment["OCTR_REDIS_PASSWORD_FILE"] == f"/run/secrets/{secret}"
        assert {s["source"] for s in stack["services"][role]["secrets"]} & {
            "redis_password",
            "redis_api_password",
            "redis_worker_password",
        } == {secret}
    redis = stack["services"]["redis"]
    assert {s["source"] for s in redis["secrets"]} == {"redis_password", "redis_users"}
    assert "cat /run/secrets/redis_users >> /tmp/secret.conf" in " ".join(redis["entrypoint"])


def test_the_redis_password_is_a_secret_on_no_command_line_and_in_no_environment(
    stack: dict[str, Any],
) -> None:
    # `docker inspect` shows every container's command line and environment.
    shown = json.dumps(
        {
            name: {
                key: service.get(key)
                for key in ("command", "entrypoint", "environment", "healthcheck")
            }
            for name, service in stack["services"].items()
        }
    )
    assert "REDIS_PASSWORD" not in shown.replace("OCTR_REDIS_PASSWORD_FILE", "")
    for name, secret in (("redis", "redis_password"), ("api", "redis_api_password"),
                         ("worker", "redis_worker_password")):  # fmt: skip
        assert secret in {s["source"] for s in stack["services"][name]["secrets"]}, name


def test_every_secret_is_a_file_as_read_only_containers_need(stack: dict[str, Any]) -> None:
    # Compose writes an `environment:` secret into the container, and refuses to for a read-only
    # one: the API and the workers would not start (seen with Compose 2.40.3).
    assert {name: set(secret) - {"name"} for name, secret in stack["secrets"].items()} == {
        name: {"file"}
        for name in (
            "redis_password",
            "redis_api_password",
            "redis_worker_password",
            "redis_users",
            "api_keys",
            "metrics_key",
        )
    }
    assert stack["secrets"]["redis_password"]["file"] == str(ROOT / "deploy" / "redis-password")
    assert stack["services"]["api"]["read_only"] and stack["services"]["worker"]["read_only"]


def test_images_are_the_registrys_unless_a_variable_names_others(compose: list[str]) -> None:
    default = run_compose(compose, "config", "--format", "json", **REQUIRED)
    services = json.loads(default.stdout)["services"]
    assert {name: services[name]["image"] for name in DEFAULT_IMAGES} == {
        name: image for name, (_, image) in DEFAULT_IMAGES.items()
    }
    local = {variable: f"local/{variable.lower()}:1" for variable, _ in DEFAULT_IMAGES.values()}
    shown = run_compose(compose, "config", "--format", "json", **local, **REQUIRED)
    services = json.loads(shown.stdout)["services"]
    assert {name: services[name]["image"] for name in DEFAULT_IMAGES} == {
        name: local[variable] for name, (variable, _) in DEFAULT_IMAGES.items()
    }


def test_unset_hyper_parameters_stay_unset(compose: list[str]) -> None:
    shown = run_compose(compose, "config", "--format", "json", OCTR_L1="2.5", **REQUIRED)
    environment = json.loads(shown.stdout)["services"]["worker"]["environment"]
    assert environment["OCTR_L1"] == "2.5"
    # None: compose leaves the variable out of the container instead of setting it empty.
    assert environment["OCTR_ALPHA"] is None


def test_grafana_secrets_come_from_variables(stack: dict[str, Any]) -> None:
    environment = stack["services"]["grafana"]["environment"]
    assert environment["GF_SECURITY_ADMIN_PASSWORD"] == REQUIRED["GRAFANA_ADMIN_PASSWORD"]
    assert environment["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    raw = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    secrets = {
        f"{name}.{key}": value
        for name, service in raw["services"].items()
        for key, value in service.get("environment", {}).items()
        if re.search("PASSWORD|SECRET|TOKEN|AUTH$", key) and not key.endswith("_FILE")
    }
    assert secrets
    for where, value in secrets.items():
        assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", value), f"{where} is not a required variable"


def test_prometheus_scrapes_the_api_and_every_worker_replica(
    stack: dict[str, Any], prometheus_config: dict[str, Any]
) -> None:
    jobs = {job["job_name"]: job for job in prometheus_config["scrape_configs"]}
    api_port = stack["services"]["api"]["environment"]["OCTR_PORT"]
    assert jobs["api"]["static_configs"] == [{"targets": [f"api:{api_port}"]}]
    worker_port = int(stack["services"]["worker"]["environment"]["OCTR_WORKER_METRICS_PORT"])
    (discovery,) = jobs["worker"]["dns_sd_configs"]
    # The bare service name: compose's DNS answers it with every replica's address.
    assert discovery == discovery | {"names": ["worker"], "type": "A", "port": worker_port}
    prometheus = stack["services"]["prometheus"]
    assert any(
        volume["source"] == str(ROOT / "deploy" / "prometheus")
        and volume["target"] == "/etc/prometheus"
        for volume in prometheus["volumes"]
    )


def test_prometheus_reads_the_api_key_from_the_metrics_key_secret(
    stack: dict[str, Any], prometheus_config: dict[str, Any]
) -> None:
    # The API shows its series of each model only to a key of the metrics scope.
    (api_job,) = [job for job in prometheus_config["scrape_configs"] if job["job_name"] == "api"]
    mounted = {s["source"]: s["target"] for s in stack["services"]["prometheus"]["secrets"]}
    assert mounted == {"metrics_key": api_job["authorization"]["credentials_file"]}
    assert stack["secrets"]["metrics_key"] == stack["secrets"]["metrics_key"] | {
        "file": str(ROOT / "deploy" / "metrics-key")
    }
    # The key is Prometheus's alone: the API reads its scopes from api_keys.
    for name, service in stack["services"].items():
        sources = {s["source"] for s in service.get("secrets", [])}
        assert name == "prometheus" or "metrics_key" not in sources, name


def test_the_metrics_key_file_can_be_elsewhere(compose: list[str]) -> None:
    shown = run_compose(
        compose,
        "config",
        "--format",
        "json",
        OCTR_METRICS_KEY_SECRET="/etc/online-ctr/metrics-key",
        **REQUIRED,
    )
    assert shown.returncode == 0, shown.stderr
    secret = json.loads(shown.stdout)["secrets"]["metrics_key"]
    assert secret["file"] == "/etc/online-ctr/metrics-key"


def test_the_image_is_built_from_the_wheelhouse_alone(stack: dict[str, Any]) -> None:
    # The air-gapped build: the wheels are made on the host (deploy/images/build.sh) and pip in
    # the build reaches no index, so the context is the wheelhouse and the health check.
    api, worker = stack["services"]["api"], stack["services"]["worker"]
    assert api["build"] == worker["build"]
    assert api["build"]["dockerfile"] == "deploy/Dockerfile"
    assert api["image"] == worker["image"]
    allowed = [
        line for line in (ROOT / ".dockerignore").read_text().splitlines() if line[:1] not in "#"
    ]
    assert allowed == ["*", "!deploy/wheelhouse/", "!deploy/healthcheck.py"]
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "COPY deploy/wheelhouse/ /wheels/" in dockerfile
    assert (
        "pip install --no-index --find-links /wheels --only-binary=:all: online-ctr" in dockerfile
    )
    # A `# syntax=` line would make BuildKit pull its frontend from a registry.
    assert "# syntax=" not in dockerfile.replace("No `# syntax=`", "")
