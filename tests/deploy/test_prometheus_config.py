"""The Prometheus configuration of the compose stack, checked by Prometheus's own promtool."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"


def test_promtool_accepts_the_config(promtool: str) -> None:
    checked = subprocess.run(
        [promtool, "check", "config", str(CONFIG)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_scrapes_often_enough_for_the_dashboard(prometheus_config: dict[str, Any]) -> None:
    # Grafana's $__rate_interval is at least four scrapes; the datasource is told this interval.
    datasource = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    (provisioned,) = datasource["datasources"]
    scrape_interval = prometheus_config["global"]["scrape_interval"]
    assert provisioned["jsonData"]["timeInterval"] == scrape_interval
