"""The Prometheus configuration of the compose stack, checked by Prometheus's own promtool."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.conftest import METRICS_KEY_SECRET, with_metrics_key_file

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"


def promtool_check(promtool: str, config: Path, *flags: str) -> None:
    """``promtool check config``, failing the test with its output."""
    checked = subprocess.run(
        [promtool, "check", "config", *flags, str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_promtool_accepts_the_config_syntax(promtool: str) -> None:
    # The key file exists only inside the compose stack's Prometheus container.
    promtool_check(promtool, CONFIG, "--syntax-only")


def test_promtool_accepts_the_config_with_its_key_file(
    promtool: str, prometheus_config: dict[str, Any], tmp_path: Path
) -> None:
    # Every check, files included: only the key file's path is this test's.
    key_file = tmp_path / "metrics-key"
    key_file.write_text("a-metrics-key-of-the-test\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(with_metrics_key_file(prometheus_config, key_file)))
    promtool_check(promtool, config)


def test_only_the_api_is_scraped_with_a_key(prometheus_config: dict[str, Any]) -> None:
    # The API shows its model series only to a key of the metrics scope; a worker's /metrics
    # is never published and needs none.
    keyed = {
        job["job_name"]: job["authorization"]
        for job in prometheus_config["scrape_configs"]
        if "authorization" in job
    }
    assert keyed == {"api": {"type": "Bearer", "credentials_file": METRICS_KEY_SECRET}}


def test_scrapes_often_enough_for_the_dashboard(prometheus_config: dict[str, Any]) -> None:
    # Grafana's $__rate_interval is at least four scrapes; the datasource is told this interval.
    datasource = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    (provisioned,) = datasource["datasources"]
    scrape_interval = prometheus_config["global"]["scrape_interval"]
    assert provisioned["jsonData"]["timeInterval"] == scrape_interval
