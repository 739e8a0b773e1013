"""Shared fixtures for the deployment checks: paths, the dashboard and its PromQL."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE_FILE = ROOT / "docker-compose.yml"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "online-ctr.json"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml"

#: Values for the Grafana variables the dashboard uses, as the tests' Prometheus (1 s scrapes)
#: needs them: every model, and windows that hold many scrapes.
GRAFANA_VARIABLES = {
    "model": ".*",
    "window": "1m",
    "__rate_interval": "1m",
    "__interval": "5s",
    "__range": "5m",
}

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


@dataclass(frozen=True)
class Query:
    """One PromQL expression of the dashboard, with Grafana's variables filled in."""

    where: str
    grafana_expr: str
    expr: str


def substitute(expr: str) -> str:
    """Fill Grafana's ``$variables`` in as the tests need; an unknown one raises KeyError."""

    def value(match: re.Match[str]) -> str:
        return GRAFANA_VARIABLES[match.group(1) or match.group(2)]

    return _VARIABLE.sub(value, expr)


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels", []))


def dashboard_queries(dashboard: dict[str, Any]) -> list[Query]:
    """Every PromQL expression of the dashboard's panels, where it is found."""
    queries = []
    for panel in iter_panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            where = f"panel {panel['title']!r} query {target['refId']}"
            queries.append(Query(where, target["expr"], substitute(target["expr"])))
    return queries


@pytest.fixture(scope="session")
def dashboard() -> dict[str, Any]:
    """The provisioned dashboard, parsed."""
    result: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return result


@pytest.fixture(scope="session")
def queries(dashboard: dict[str, Any]) -> list[Query]:
    """The dashboard's PromQL, ready to send to Prometheus."""
    return dashboard_queries(dashboard)


@pytest.fixture(scope="session")
def prometheus_config() -> dict[str, Any]:
    """The Prometheus configuration the compose stack mounts."""
    result: dict[str, Any] = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    return result


#: Where the compose stack mounts the API key Prometheus scrapes the API with (the secret
#: ``metrics_key``), as the shipped configuration names it.
METRICS_KEY_SECRET = "/run/secrets/metrics_key"


def with_metrics_key_file(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The Prometheus configuration with the api job's key read from ``path``: only the file's
    path changes, so the tests prove the shipped way of sending the key."""
    changed = copy.deepcopy(config)
    (api,) = [job for job in changed["scrape_configs"] if job["job_name"] == "api"]
    assert api["authorization"]["credentials_file"] == METRICS_KEY_SECRET, api
    api["authorization"]["credentials_file"] = str(path)
    return changed


def _require_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed; deploy/ci-install.sh installs it")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of ``promtool`` (Debian package ``prometheus``)."""
    return _require_tool("promtool")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """Path of the ``prometheus`` server (Debian package ``prometheus``)."""
    return _require_tool("prometheus")


def _compose_v2(command: list[str]) -> bool:
    found = subprocess.run(
        [*command, "version", "--short"], capture_output=True, text=True, check=False
    )
    major = found.stdout.strip().removeprefix("v").split(".")[0]
    return found.returncode == 0 and major.isdigit() and int(major) >= 2


@pytest.fixture(scope="session")
def compose() -> list[str]:
    """The Compose v2 client as a command prefix; it parses files without a Docker engine."""
    candidates = []
    if docker := shutil.which("docker"):
        candidates.append([docker, "compose"])
    if standalone := shutil.which("docker-compose"):
        candidates.append([standalone])
    for command in candidates:
        if _compose_v2(command):
            return command
    pytest.skip("no Docker Compose v2 client (v1 validates differently); deploy/ci-install.sh")
