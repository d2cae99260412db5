"""The shipped rules (deploy/prometheus/rules.yml): promtool accepts them and the scrape config, their promtool
suite passes with a quiet, a firing and a resolved moment for every alert, every alert names its runbook
section, and every metric a rule or a dashboard panel selects is one the services export (docs/operations.md's
table) or the edge's Envoy serves."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.fixtures.metrics import METRICS_DOC, documented
from tests.fixtures.prometheus import GRAFANA_DIR, alerts, binary, dashboard_queries, metric_names, recordings, rules
from thermostat.dev.prometheus import PROMETHEUS_DIR, RULES, SCRAPE_CONFIG
from tools import deploy_check

TESTS = PROMETHEUS_DIR / "tests.yml"
# the edge's Envoy stats the rules and dashboards read (its /stats/prometheus; tests/e2e/test_prometheus.py
# sees each answer from a real Envoy), and Prometheus's own `up`
ENVOY_STATS = {
    "envoy_http_downstream_rq_xx",
    "envoy_http_downstream_rq_time_bucket",
    "envoy_cluster_membership_healthy",
}
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("",), "gauge": ("",)}


def _exported() -> set[str]:
    names = {"up"} | ENVOY_STATS | {rule["record"] for rule in recordings()}
    for name, row in documented().items():
        names |= {name + suffix for suffix in SUFFIXES[row.type]}
    return names


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], capture_output=True, text=True, timeout=60, check=False)


def test_promtool_accepts_the_scrape_config_and_its_rules() -> None:
    ran = _promtool("check", "config", str(SCRAPE_CONFIG))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"SUCCESS: {len(rules())} rules found" in ran.stdout + ran.stderr


def test_promtool_test_rules_passes() -> None:
    """`promtool test rules deploy/prometheus/tests.yml`: each alert quiet, firing with its labels and
    annotations, then resolved."""
    ran = _promtool("test", "rules", str(TESTS))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout + ran.stderr


def test_every_alert_has_a_quiet_a_firing_and_a_resolved_moment_in_the_promtool_suite() -> None:
    groups = yaml.safe_load(TESTS.read_text())["tests"]
    cases: dict[str, list[bool]] = {}
    for group in groups:
        for case in sorted(group["alert_rule_test"], key=lambda c: _minutes(c["eval_time"])):
            cases.setdefault(case["alertname"], []).append(bool(case["exp_alerts"]))
    assert sorted(cases) == sorted(a["alert"] for a in alerts())
    for name, firing in cases.items():
        assert firing == [False, True, False], f"{name}: quiet, firing, resolved expected, got {firing}"


def _minutes(duration: str) -> int:
    value, unit = re.fullmatch(r"(\d+)([mh])", duration).groups()  # type: ignore[union-attr]
    return int(value) * (60 if unit == "h" else 1)


@pytest.mark.parametrize("alert", alerts(), ids=lambda a: a["alert"])
def test_each_alert_has_a_severity_a_for_a_summary_and_a_runbook_section(alert) -> None:
    assert alert["labels"]["severity"] in {"critical", "warning"}
    assert re.fullmatch(r"\d+[smh]", alert["for"]), alert["for"]
    assert alert["annotations"]["summary"]
    anchor = alert["alert"].lower()
    assert f"Runbook: docs/operations.md#{anchor}." in alert["annotations"]["description"]
    headings = re.findall(r"^### `?(\w+)`?$", METRICS_DOC.read_text(), flags=re.M)
    assert alert["alert"] in headings, f"docs/operations.md has no runbook section ### {alert['alert']}"


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r.get("alert") or r["record"])
def test_every_metric_a_rule_selects_is_exported(rule) -> None:
    unknown = metric_names(rule["expr"]) - _exported()
    assert not unknown, f"{rule.get('alert') or rule['record']} selects {sorted(unknown)}, which nothing exports"


@pytest.mark.parametrize("query", dashboard_queries(), ids=lambda q: f"{q.dashboard}: {q.panel}")
def test_every_metric_a_dashboard_panel_queries_is_exported(query) -> None:
    names = metric_names(query.expr)
    assert names, f"{query.panel}: no metric in {query.expr!r}"
    unknown = names - _exported()
    assert not unknown, f"{query.dashboard}/{query.panel} queries {sorted(unknown)}, which nothing exports"


def test_the_dashboards_are_grafana_json_on_a_chosen_prometheus_with_unique_uids() -> None:
    boards = {path.stem: json.loads(path.read_text()) for path in sorted(GRAFANA_DIR.glob("*.json"))}
    assert sorted(boards) == ["edge", "metering", "pods", "pool"]
    assert len({board["uid"] for board in boards.values()}) == len(boards)
    for name, board in boards.items():
        (variable,) = board["templating"]["list"]
        assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
        ids = [panel["id"] for panel in board["panels"]]
        assert len(set(ids)) == len(ids), name
        for panel in board["panels"]:
            assert panel["title"] and panel["targets"], (name, panel)
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), (name, panel["title"])


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        pytest.param('sum by (le, x) (rate(a_bucket{le="1.0"}[5m]))', {"a_bucket"}, id="by-clause-and-matchers"),
        pytest.param("a > 0.05 unless on () b offset 5m", {"a", "b"}, id="keywords-and-numbers"),
        pytest.param("histogram_quantile(0.9, c:d:e) / clamp_min(f, 1e-9)", {"c:d:e", "f"}, id="recorded-names"),
    ],
)
def test_metric_names_are_read_out_of_promql(expr, names) -> None:
    assert metric_names(expr) == names


def test_the_rules_file_is_plain_prometheus_rules() -> None:
    assert set(yaml.safe_load(RULES.read_text())) == {"groups"}


def _prometheus_rule(resources: list[deploy_check.Resource]) -> deploy_check.Resource:
    (rule,) = [r for r in resources if r.key == ("PrometheusRule", "thermostat")]
    return rule


def test_the_kubernetes_base_holds_the_rules_as_a_prometheus_rule_valid_against_its_crd(resources) -> None:
    assert deploy_check.schema_problems([_prometheus_rule(resources)]) == []
    assert deploy_check.prometheus_rule_problems(resources) == []


def test_a_misspelt_field_of_the_prometheus_rule_is_an_error_naming_its_path(resources) -> None:
    rule = _prometheus_rule(resources)
    rule.doc["spec"]["groups"][1]["rules"][0]["fro"] = rule.doc["spec"]["groups"][1]["rules"][0].pop("for")
    (problem,) = deploy_check.schema_problems([rule])
    assert "spec.groups.1.rules.0" in problem and "'fro'" in problem, problem


def test_a_prometheus_rule_that_drifted_from_the_rules_file_is_an_error(resources) -> None:
    _prometheus_rule(resources).doc["spec"]["groups"].pop()
    assert deploy_check.prometheus_rule_problems(resources) == [
        "PrometheusRule thermostat differs from deploy/prometheus/rules.yml: run `make k8s`"
    ]


@pytest.mark.parametrize(
    ("ci", "outcome"),
    [
        pytest.param("", pytest.skip.Exception, id="developer-skips"),
        pytest.param("true", pytest.fail.Exception, id="ci-fails"),
    ],
)
def test_a_missing_promtool_skips_with_its_reason_but_fails_under_ci(monkeypatch, ci, outcome) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"promtool is not installed .*apt-get install prometheus"):
        binary("promtool")
