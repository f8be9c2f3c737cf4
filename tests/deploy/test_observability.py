"""deploy/prometheus alert rules and deploy/grafana dashboards, checked by promtool and the code.

``promtool`` (Debian's ``prometheus`` package; ``.ci/run`` installs it) checks
the rules' syntax and runs ``alerts.test.yml``, whose series make each alert
fire and leave it quiet where it must stay quiet. Every PromQL expression of the
dashboards goes through ``promtool check rules`` too, and every metric name and
label matcher in any of them must be one that ``app/telemetry/metrics.py`` exports: a
renamed metric fails here instead of leaving a silent panel or an alert that can
never fire.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import app.telemetry.metrics
from tests.deploy.files import run_tool
from tests.support.processes import REPO_ROOT

PROMETHEUS = REPO_ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS / "alerts.yml"
ALERT_TESTS = PROMETHEUS / "alerts.test.yml"
SCRAPE_CONFIG = PROMETHEUS / "prometheus.yml"
DASHBOARDS = sorted((REPO_ROOT / "deploy" / "grafana").glob("*.json"))
# the alerts the issue asks for, by what they watch
REQUIRED_ALERTS = {
    "LeaseholdRunsOrphaned",
    "LeaseholdRenewalFailures",
    "LeaseholdLeasesInJeopardy",
    "LeaseholdOldestQueuedAge",
    "LeaseholdRedisMemoryPressure",
    "LeaseholdNoWorkers",
    "LeaseholdWorkersLost",
    "LeaseholdCreatesRefused",
}
# labels Prometheus adds to every scraped series, and the histogram bucket label
SCRAPE_LABELS = {"instance", "job", "le"}
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}
METRIC = re.compile(r"\bleasehold_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(leasehold_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
# Grafana's own variables, given the value Prometheus would see
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (apt-get install prometheus; .ci/run does)")
    return path


def exported() -> dict[str, set[str]]:
    """Every series name app/telemetry/metrics.py exports, with the label names it carries."""
    names: dict[str, set[str]] = {}
    for collector in vars(app.telemetry.metrics).values():
        if not isinstance(collector, MetricWrapperBase):
            continue
        labels = set(collector._labelnames)
        for family in collector.describe():
            for suffix in SUFFIXES[family.type]:
                names[family.name + suffix] = labels
    return names


def alert_rules(path: Path = ALERTS) -> list[dict[str, Any]]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_targets(path: Path) -> Iterator[tuple[str, str]]:
    """(panel title, expression) of every query in a dashboard, rows' panels included."""
    dashboard = json.loads(path.read_text())
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                yield inner["title"], target["expr"]


def prometheus_expr(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def unknown_names(expr: str, metrics: dict[str, set[str]]) -> list[str]:
    """What ``expr`` names that the code does not export: metrics, matched or grouped labels."""
    used = set(METRIC.findall(expr))
    problems = sorted(used - metrics.keys())
    for name, matchers in SELECTOR.findall(expr):
        allowed = metrics.get(name, set()) | SCRAPE_LABELS
        problems += [
            f"{name}{{{label}}}" for label in MATCHER.findall(matchers) if label not in allowed
        ]
    known = SCRAPE_LABELS.union(*(metrics.get(name, set()) for name in used))
    for grouping in GROUPING.findall(expr):
        labels = {label.strip() for label in grouping.split(",")} - {""}
        problems += [f"by ({label})" for label in sorted(labels - known)]
    return problems


def test_promtool_accepts_the_alert_rules() -> None:
    result = run_tool(promtool(), "check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_the_example_scrape_config_is_valid_and_loads_the_alert_rules() -> None:
    result = run_tool(promtool(), "check", "config", str(SCRAPE_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout
    jobs = {job["job_name"] for job in yaml.safe_load(SCRAPE_CONFIG.read_text())["scrape_configs"]}
    assert jobs == {"leasehold-api", "leasehold-worker"}


def test_the_alerts_the_issue_names_exist_with_a_severity_and_a_description() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert set(rules) >= REQUIRED_ALERTS
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name


def test_promtool_unit_tests_make_every_alert_fire_and_stay_quiet() -> None:
    result = run_tool(promtool(), "test", "rules", str(ALERT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    cases = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    fired = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts - fired == set(), "alerts without a case that makes them fire"
    assert alerts - quiet == set(), "alerts without a case where they must stay quiet"


def test_the_unit_tests_catch_an_alert_that_no_longer_fires(tmp_path: Path) -> None:
    """promtool really evaluates: a threshold raised past the series fails the tests."""
    rules = ALERTS.read_text()
    assert "leasehold_oldest_queued_age_seconds) > 300" in rules
    (tmp_path / "alerts.yml").write_text(rules.replace("seconds) > 300", "seconds) > 3000"))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts.test.yml")
    result = run_tool(promtool(), "test", "rules", str(tmp_path / "alerts.test.yml"))
    assert result.returncode != 0
    assert "alertname: LeaseholdOldestQueuedAge" in result.stdout + result.stderr


def test_alerts_and_dashboards_name_only_metrics_and_labels_the_code_exports() -> None:
    metrics = exported()
    exprs = [(f"alert {rule['alert']}", rule["expr"]) for rule in alert_rules()]
    for path in DASHBOARDS:
        exprs += [(f"{path.name}: {title}", expr) for title, expr in dashboard_targets(path)]
    problems = {where: unknown_names(expr, metrics) for where, expr in exprs}
    assert {where: names for where, names in problems.items() if names} == {}


def test_the_name_check_catches_a_renamed_metric_and_a_misspelt_label() -> None:
    metrics = exported()
    assert "leasehold_leases_lost_total" in metrics
    assert unknown_names("rate(leasehold_runs_create_total[5m])", metrics) == [
        "leasehold_runs_create_total"
    ]
    assert unknown_names('leasehold_leases_lost_total{reson="jeopardy"}', metrics) == [
        "leasehold_leases_lost_total{reson}"
    ]
    assert unknown_names("sum by (queue) (leasehold_renewal_failures_total)", metrics) == [
        "by (queue)"
    ]
    assert (
        unknown_names('sum by (instance) (leasehold_leases_lost_total{reason="x"})', metrics) == []
    )


def test_every_alerted_metric_has_a_dashboard_panel() -> None:
    alerted = {name for rule in alert_rules() for name in METRIC.findall(rule["expr"])}
    shown = {
        name
        for path in DASHBOARDS
        for _, expr in dashboard_targets(path)
        for name in METRIC.findall(expr)
    }
    assert alerted - shown == set()


@pytest.mark.parametrize("path", DASHBOARDS, ids=[path.name for path in DASHBOARDS])
def test_the_dashboard_is_grafana_json_over_a_chosen_prometheus(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"] and dashboard["title"]
    variables = {var["name"]: var for var in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    graphs = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert graphs
    for panel in graphs:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]


def test_promtool_parses_every_dashboard_expression(tmp_path: Path) -> None:
    """Each query, as a recording rule, goes through the same PromQL parser Prometheus uses."""
    rules = [
        {"record": f"dashboard:query_{n}", "expr": prometheus_expr(expr)}
        for n, (_, expr) in enumerate(
            target for path in DASHBOARDS for target in dashboard_targets(path)
        )
    ]
    assert rules
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_tool(promtool(), "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "d", "rules": [{"record": "a:b", "expr": "sum by (queue (x)"}]}]}
        )
    )
    assert run_tool(promtool(), "check", "rules", str(broken)).returncode != 0
