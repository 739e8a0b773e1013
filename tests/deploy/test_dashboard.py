"""The provisioned Grafana dashboard: its structure, its datasource and the syntax of its PromQL."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from online_ctr.config.settings import setting_variables
from online_ctr.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
METRIC_NAME = re.compile(r"\bonline_ctr_\w+")
SETTING_NAME = re.compile(r"\bOCTR_\w+")
JOB_MATCHER = re.compile(r'\bjob=~?"([^"]+)"')
#: The series names each metric type exposes.
SERIES_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}
GRAFANA = ROOT / "deploy" / "grafana"

#: Metric families the dashboard reads, as the service declares them (service/metrics.py).
SERVICE_METRICS = (
    "online_ctr_nonzero_weights",
    "online_ctr_features_tracked",
    "online_ctr_learned_examples_total",
    "online_ctr_progressive_logloss_total",
    "online_ctr_progressive_auc",
    "online_ctr_predictions_total",
    "online_ctr_predict_latency_seconds",
    "online_ctr_learn_batch_seconds",
    "online_ctr_stream_lag_entries",
    "online_ctr_http_requests_total",
    "online_ctr_predicted_clicks_total",
    "online_ctr_clicks_total",
    "online_ctr_base_rate_logit",
)
#: What the Limits row shows: for each bound of docs/limits.md, what it holds and what was
#: dropped or refused at it.
LIMIT_METRICS = (
    "online_ctr_idempotency_keys",
    "online_ctr_idempotency_keys_evicted_total",
    "online_ctr_pending_impressions",
    "online_ctr_unlogged_impressions_total",
    "online_ctr_name_table_bytes",
    "online_ctr_name_table_resets_total",
    "online_ctr_predict_copy_features",
    "online_ctr_http_connections",
    "online_ctr_http_refusals_total",
    "online_ctr_redis_memory_bytes",
    "online_ctr_redis_maxmemory_bytes",
    "online_ctr_redis_memory_refusals_total",
    "online_ctr_feature_names_refused_total",
)


def provisioned_datasource() -> dict[str, Any]:
    """The single datasource Grafana is provisioned with."""
    config = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    (datasource,) = config["datasources"]
    result: dict[str, Any] = datasource
    return result


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels, rows excluded (it has no collapsed rows)."""
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def test_every_datasource_reference_is_the_provisioned_one(dashboard: dict[str, Any]) -> None:
    datasource = provisioned_datasource()
    expected = {"type": datasource["type"], "uid": datasource["uid"]}
    references = [panel["datasource"] for panel in panels(dashboard)]
    references += [
        target["datasource"] for panel in panels(dashboard) for target in panel["targets"]
    ]
    references += [
        variable["datasource"]
        for variable in dashboard["templating"]["list"]
        if variable["type"] == "query"
    ]
    assert references
    assert all(reference == expected for reference in references), references


def test_datasource_points_at_the_compose_prometheus() -> None:
    datasource = provisioned_datasource()
    assert datasource["url"] == "http://prometheus:9090"
    assert datasource["access"] == "proxy"


def test_the_provider_loads_the_directory_compose_mounts() -> None:
    provider_file = GRAFANA / "provisioning" / "dashboards" / "online-ctr.yml"
    (provider,) = yaml.safe_load(provider_file.read_text())["providers"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in mounts


def row_panels(dashboard: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """The panels under the row titled ``title``, up to the next row."""
    under: list[dict[str, Any]] | None = None
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            if under is not None:
                break
            under = [] if panel["title"] == title else None
        elif under is not None:
            under.append(panel)
    assert under, f"no panels under a row {title!r}"
    return under


def test_panels_have_titles_descriptions_units_and_unique_ids(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        assert panel["title"].strip(), panel
        assert panel["description"].strip(), panel["title"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def service_series() -> set[str]:
    """Names of every series the service's metrics expose, from their declarations."""
    registry = CollectorRegistry()
    Metrics(registry)
    # Labelled metrics without children yet still report their family, with no samples.
    return {
        family.name + suffix
        for family in registry.collect()
        for suffix in SERIES_SUFFIXES[family.type]
    }


@pytest.mark.parametrize("metric", SERVICE_METRICS)
def test_the_dashboard_shows_each_required_metric(queries: list[Any], metric: str) -> None:
    assert any(metric in query.expr for query in queries)


@pytest.mark.parametrize("metric", LIMIT_METRICS)
def test_the_limits_row_shows_each_bound(dashboard: dict[str, Any], metric: str) -> None:
    expressions = [
        target["expr"] for panel in row_panels(dashboard, "Limits") for target in panel["targets"]
    ]
    assert any(metric in METRIC_NAME.findall(expr) for expr in expressions)


#: What the lean-models row shows: admission and negative sampling at work.
LEAN_METRICS = (
    "online_ctr_features_tracked",
    "online_ctr_features_admitted_total",
    "online_ctr_admission_dropped_gradients_total",
    "online_ctr_sampled_out_examples_total",
    "online_ctr_learned_weight_total",
    "online_ctr_admission_filter_fill_ratio",
    "online_ctr_features_pending_admission",
    "online_ctr_state_bytes",
    "online_ctr_features_expired_total",
    "online_ctr_features_evicted_total",
)


@pytest.mark.parametrize("metric", LEAN_METRICS)
def test_the_lean_models_row_shows_admission_and_sampling(
    dashboard: dict[str, Any], metric: str
) -> None:
    title = "Lean models: admission, expiry, budgets and negative sampling"
    expressions = [
        target["expr"] for panel in row_panels(dashboard, title) for target in panel["targets"]
    ]
    assert any(metric in METRIC_NAME.findall(expr) for expr in expressions)


def test_the_log_loss_is_a_mean_over_the_weight_learned(dashboard: dict[str, Any]) -> None:
    """With importance weights the mean is over the weight, not the examples."""
    expressions = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    losses = [e for e in expressions if "online_ctr_progressive_logloss_total" in e]
    assert losses and all("online_ctr_learned_weight_total" in e for e in losses)


def test_redis_memory_is_drawn_against_its_limit(dashboard: dict[str, Any]) -> None:
    (panel,) = [
        panel
        for panel in row_panels(dashboard, "Limits")
        if any("online_ctr_redis_memory_bytes" in t["expr"] for t in panel["targets"])
    ]
    used, limit = (METRIC_NAME.findall(target["expr"]) for target in panel["targets"])
    assert (used, limit) == (
        ["online_ctr_redis_memory_bytes"],
        ["online_ctr_redis_maxmemory_bytes"],
    )
    assert panel["fieldConfig"]["defaults"]["unit"] == "bytes"


def test_each_limit_panel_names_the_settings_that_bound_it(dashboard: dict[str, Any]) -> None:
    # A reader at a limit finds what to change; a renamed setting fails here.
    for panel in row_panels(dashboard, "Limits"):
        named = set(SETTING_NAME.findall(panel["description"]))
        assert named, panel["title"]
        assert named <= setting_variables(), (panel["title"], named - setting_variables())


def test_the_dashboard_reads_only_series_the_service_declares(queries: list[Any]) -> None:
    used = {name for query in queries for name in METRIC_NAME.findall(query.expr)}
    assert used
    assert used <= service_series(), sorted(used - service_series())


def test_job_labels_are_jobs_prometheus_scrapes(
    queries: list[Any], prometheus_config: dict[str, Any]
) -> None:
    jobs = {job["job_name"] for job in prometheus_config["scrape_configs"]}
    used = {
        job
        for query in queries
        for pattern in JOB_MATCHER.findall(query.expr)
        for job in pattern.split("|")
    }
    assert used
    assert used <= jobs, sorted(used - jobs)


def test_model_variable_lists_models_from_a_service_metric(dashboard: dict[str, Any]) -> None:
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "model"]
    assert variable["query"]["query"] == "label_values(online_ctr_learned_examples_total, model)"
    assert variable["includeAll"]


def test_every_expression_parses(queries: list[Any], promtool: str, tmp_path: Path) -> None:
    # promtool parses each recording rule's expression: a syntax check without a server.
    rules = [
        {"record": f"dashboard:query_{index}", "expr": query.expr}
        for index, query in enumerate(queries)
    ]
    rules_file = tmp_path / "dashboard-rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_models_side_by_side_compares_log_loss_auc_and_sparsity(dashboard: dict[str, Any]) -> None:
    by_title = {panel["title"]: panel for panel in panels(dashboard)}
    (table,) = [panel for title, panel in by_title.items() if title.startswith("Models side")]
    log_loss = by_title["Progressive log loss (mean per example over $window)"]
    expressions = [target["expr"] for target in table["targets"]]
    # The same log loss as its own panel, so the two never disagree.
    assert expressions[0] == log_loss["targets"][0]["expr"]
    assert expressions[1:] == [
        'max by (model) (online_ctr_progressive_auc{job="worker", model=~"$model"})',
        'max by (model) (online_ctr_nonzero_weights{job="api", model=~"$model"})',
    ]
    # One row per model: instant values, merged on the model label.
    assert table["type"] == "table"
    assert all(target["instant"] and target["format"] == "table" for target in table["targets"])
    assert table["transformations"][0]["id"] == "merge"
