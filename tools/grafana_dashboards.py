"""The Grafana dashboards as code (`make k8s` writes deploy/grafana/*.json from here; tools/deploy_check.py fails
when a committed one differs): pods, pool, metering and budgets, edge. Each panel reads the recorded series of
deploy/prometheus/rules.yml where one exists, else the metrics docs/operations.md lists (a unit test checks every
name). The data source is a variable chosen at import (`${datasource}`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EDGE_LATENCY = 'envoy_http_downstream_rq_time_bucket{envoy_http_conn_manager_prefix="edge"}'
UPSTREAMS = 'envoy_cluster_name=~"pod-controller|idle-monitor|pool-dispatcher|metering"'
DS = {"type": "prometheus", "uid": "${datasource}"}


def panel(
    i: int,
    title: str,
    exprs: list[str],
    *,
    unit: str = "short",
    kind: str = "timeseries",
    legend: list[str] | None = None,
    desc: str = "",
) -> dict[str, Any]:
    targets = [
        {"refId": chr(65 + n), "datasource": DS, "expr": e, "legendFormat": (legend[n] if legend else "__auto")}
        for n, e in enumerate(exprs)
    ]
    p = {
        "id": i,
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": 12 * ((i - 1) % 2), "y": 8 * ((i - 1) // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": targets,
        "options": {},
    }
    if kind == "state-timeline":
        p["options"] = {"mergeValues": True, "showValue": "never"}
    return p


def dashboard(uid: str, title: str, desc: str, panels: list[tuple[str, list[str], dict[str, Any]]]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "description": desc,
        "tags": ["thermostat"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Prometheus",
                    "current": {},
                }
            ]
        },
        "panels": [panel(i + 1, title, exprs, **options) for i, (title, exprs, options) in enumerate(panels)],
    }


BOARDS = {
    "pods": dashboard(
        "thermostat-pods",
        "Thermostat: pods",
        "Wakes, the monitor's phases and stops, and what pods cost.",
        [
            (
                "Phase by pod (1 = in that phase)",
                ["max by (pod, phase) (thermostat_monitor_phase) == 1"],
                dict(
                    kind="state-timeline",
                    legend=["{{pod}} {{phase}}"],
                    desc="DOWN, BOOTING, READY per pod as the idle monitor ticks it",
                ),
            ),
            ("Wakes per second by outcome", ["thermostat:wakes:rate5m"], dict(unit="reqps", legend=["{{outcome}}"])),
            ("Wake latency (p90, 15m)", ["thermostat:wake_seconds:p90_15m"], dict(unit="s", legend=["{{outcome}}"])),
            (
                "Pod stops in the last hour by trigger",
                ["thermostat:pod_stops:increase1h"],
                dict(legend=["{{trigger}}"], desc="idle, boot-grace, stall, runtime-cap, budget, manual, orphan"),
            ),
            (
                "Idle streak and booting ticks",
                [
                    "max by (pod) (thermostat_monitor_idle_streak_ticks)",
                    "max by (pod) (thermostat_monitor_booting_ticks)",
                ],
                dict(legend=["{{pod}} idle", "{{pod}} booting"]),
            ),
            (
                "Runtime against the runtime cap",
                [
                    # the runtime's series ends with the pod: held 5 m so the stop shows where the line stopped
                    "max by (pod) (max_over_time(thermostat_monitor_runtime_seconds[5m]))",
                    "max by (pod) (thermostat_monitor_runtime_cap_seconds)",
                ],
                dict(
                    unit="s",
                    legend=["{{pod}} runtime", "{{pod}} cap"],
                    desc="seconds since each pod came up, and MAX_RUNTIME_MINUTES: the monitor stops it at the cap",
                ),
            ),
            (
                "Spend today by pod (USD)",
                ['thermostat_spend_usd{subject="pod", period="day"}'],
                dict(unit="currencyUSD", legend=["{{name}}"]),
            ),
            (
                "Billable RunPod calls in 15m, by action and whether RunPod accepted them",
                ["sum by (action, ok) (increase(thermostat_billable_actions_total[15m]))"],
                dict(legend=["{{action}} ok={{ok}}"]),
            ),
        ],
    ),
    "pool": dashboard(
        "thermostat-pool",
        "Thermostat: worker pool",
        "Jobs, the queue and the machines that run them.",
        [
            (
                "Jobs finished per second by outcome",
                ["sum by (state) (thermostat:pool_jobs_finished:rate5m)"],
                dict(unit="reqps", legend=["{{state}}"]),
            ),
            ("Jobs not ended by state", ["sum by (state) (thermostat_pool_jobs)"], dict(legend=["{{state}}"])),
            (
                "Queue wait p99 (5m)",
                ["thermostat:pool_queue_seconds:p99_5m"],
                dict(unit="s", legend=["{{machine_type}}"]),
            ),
            (
                "Machines by state and backend",
                ["sum by (state, backend) (thermostat_pool_machines)"],
                dict(legend=["{{backend}} {{state}}"]),
            ),
            (
                "Machines against the fleet cap",
                [
                    # every replica reads the pool-wide count: the largest replica's total, not their sum
                    "max(sum without (state, backend) (thermostat_pool_machines))",
                    "min(thermostat_pool_fleet_cap)",
                ],
                dict(legend=["machines", "cap (POOL_MAX_WORKERS_TOTAL)"], desc="the cap's line is absent while unset"),
            ),
            (
                "Boots: machines starting and boots failed (15m)",
                [
                    'sum by (backend) (thermostat_pool_machines{state="starting"})',
                    "sum by (machine_type, backend) (increase(thermostat_pool_boot_failures_total[15m]))",
                ],
                dict(legend=["{{backend}} starting", "{{machine_type}} on {{backend}} failed"]),
            ),
            (
                "Cold starts per second (queue wait over 1 s)",
                [
                    "sum by (machine_type) (rate(thermostat_pool_queue_seconds_count[5m]))"
                    ' - sum by (machine_type) (rate(thermostat_pool_queue_seconds_bucket{le="1.0"}[5m]))'
                ],
                dict(
                    unit="reqps",
                    legend=["{{machine_type}}"],
                    desc="jobs that waited for a machine to boot rather than finding a warm one",
                ),
            ),
        ],
    ),
    "metering": dashboard(
        "thermostat-metering",
        "Thermostat: metering and budgets",
        "Ledger lag, spend and what is left under each ceiling.",
        [
            (
                "Ledger lag (seconds since last read)",
                ["max by (feed) (thermostat_ledger_lag_seconds)"],
                dict(unit="s", legend=["{{feed}}"]),
            ),
            (
                "Ledger lag (entries behind)",
                ["max by (feed) (thermostat_ledger_lag_events)"],
                dict(legend=["{{feed}}"]),
            ),
            (
                "Spend this month by tenant (USD)",
                ['max by (name) (thermostat_spend_usd{subject="tenant", period="month"})'],
                dict(unit="currencyUSD", legend=["{{name}}"]),
            ),
            (
                "Spend today by pod (USD)",
                ['max by (name) (thermostat_spend_usd{subject="pod", period="day"})'],
                dict(unit="currencyUSD", legend=["{{name}}"]),
            ),
            (
                "Budget headroom (USD left)",
                ["min by (subject, name, period) (thermostat_budget_remaining_usd)"],
                dict(unit="currencyUSD", legend=["{{subject}} {{name}} {{period}}"]),
            ),
            (
                "Entries landed per second",
                ["sum by (feed) (rate(thermostat_ledger_entries_landed_total[5m]))"],
                dict(unit="reqps", legend=["{{feed}}"]),
            ),
        ],
    ),
    "edge": dashboard(
        "thermostat-edge",
        "Thermostat: edge",
        "What the Envoy edge answers: requests, latency, 5xx, upstream health.",
        [
            (
                "Requests per second by status class",
                ["thermostat:edge_requests:rate5m"],
                dict(unit="reqps", legend=["{{envoy_response_code_class}}xx"]),
            ),
            (
                "Latency p50 / p99",
                [
                    f"histogram_quantile(0.5, sum by (le) (rate({EDGE_LATENCY}[5m])))",
                    f"histogram_quantile(0.99, sum by (le) (rate({EDGE_LATENCY}[5m])))",
                ],
                dict(unit="ms", legend=["p50", "p99"]),
            ),
            ("5xx share", ["thermostat:edge_5xx:ratio5m"], dict(unit="percentunit", legend=["5xx"])),
            (
                "Healthy endpoints per upstream",
                [f"min by (envoy_cluster_name) (envoy_cluster_membership_healthy{{{UPSTREAMS}}})"],
                dict(legend=["{{envoy_cluster_name}}"]),
            ),
            (
                "Services up (scrape answered)",
                ['up{system="thermostat"}'],
                dict(kind="state-timeline", legend=["{{job}}"]),
            ),
        ],
    ),
}


def render() -> dict[Path, str]:
    """Every dashboard file (path under the repository → text)."""
    return {
        Path("deploy/grafana") / f"{name}.json": json.dumps(board, indent=2) + "\n" for name, board in BOARDS.items()
    }
