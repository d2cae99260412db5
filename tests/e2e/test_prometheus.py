"""A real Prometheus beside `make run` (`PROMETHEUS=1`): the Debian binary scrapes every service and the edge's
stats with the shipped scrape config (deploy/prometheus/prometheus.yml, each target the port the stack chose)
and evaluates the shipped rules every second. After a few failed wakes, a wake, an idle stop and a pool job,
every dashboard panel's query and every recorded rule returns series; the wake alert's expression is true after
the failures; killing the idle monitor puts ThermostatServiceDown pending for it, and its restart clears it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.test_make_run import OPERATOR, POOL, DevStack
from tests.fixtures.postgres import embedded_data_dir
from tests.fixtures.prometheus import alerts, binary, dashboard_queries, recordings
from thermostat.dev.prometheus import PrometheusAPI

ADMIN = {"Authorization": "Bearer e2e-pool-admin"}
JOBS = ("pod-controller", "idle-monitor", "pool-dispatcher", "metering", "edge")


STARTED = [time.monotonic()]


def _mark(what: str) -> None:
    print(f"{time.monotonic() - STARTED[0]:6.1f}s {what}", flush=True)


def _until(what: str, check: Callable[[], Any], timeout: float = 20) -> Any:
    """`check()` once it returns something truthy, polled; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(0.2)


def _counted(prometheus: PrometheusAPI, expr: str) -> float:
    result = prometheus.query(f"sum({expr})")
    return float(result[0]["value"][1]) if result else 0.0


def _wake_alert_expr() -> str:
    (rule,) = [a for a in alerts() if a["alert"] == "ThermostatWakesFailing"]
    return str(rule["expr"])


@pytest.mark.e2e
def test_a_real_prometheus_scrapes_make_run_answers_every_dashboard_and_rule_and_sees_the_alerts() -> None:
    binary("prometheus")
    STARTED[0] = time.monotonic()
    with embedded_data_dir() as data_dir:
        stack = DevStack(
            data_dir,
            {
                "PROMETHEUS": "1",
                "PROMETHEUS_PORT": "0",
                "PROMETHEUS_SCRAPE_INTERVAL": "1s",
                "STRATA_POOL_ADMIN_TOKEN": ADMIN["Authorization"].removeprefix("Bearer "),
                # boots in seconds, an idle stop a few ticks after the pod is ready
                "RUNPOD_WAKE_POLL_SECONDS": "0.2",
                "CHECK_SECONDS": "0.3",
                "IDLE_MINUTES": "0.01",
                "POOL_MAX_WORKERS_TOTAL": "4",  # the fleet cap's series, for its panel
            },
        )
        try:
            edge = stack.wait_up()
            _mark("stack up")
            said = "".join(stack.output)
            match = re.search(r"^  prometheus\s+(http://127\.0\.0\.1:\d+)\s+alerts", said, flags=re.M)
            assert match, said[-3000:]
            sim = re.search(r"runpod simulator\s+(http://127\.0\.0\.1:\d+)/v2", said)
            assert sim, said[-3000:]
            prometheus = PrometheusAPI(match.group(1))
            stack.follow()

            def all_up() -> bool:
                health = {t["labels"]["job"]: t["health"] for t in prometheus.targets()}
                return health == dict.fromkeys(JOBS, "up")

            _until("every target up", all_up)
            _mark("targets up")
            with httpx.Client(base_url=edge, timeout=60) as client, httpx.Client(base_url=sim.group(1)) as control:
                # wakes that fail: RunPod answers every create with a 500
                control.post(
                    "/_sim/faults", json={"path": "/v2/pods*", "method": "POST", "status": 500, "remaining": None}
                )
                failed = 'thermostat_wakes_total{outcome!="Succeeded"}'
                for n in range(1, 5):
                    assert client.post("/api/pods/qwen/start", headers=OPERATOR).status_code == 409
                    # each failure scraped before the next: increase() sees every step
                    _until(f"failed wake {n} scraped", lambda n=n: _counted(prometheus, failed) >= n)
                _until("ThermostatWakesFailing's expression true", lambda: prometheus.query(_wake_alert_expr()))
                control.delete("/_sim/faults")
                _mark("wake alert true")

                put = client.put("/api/pods/qwen/budget", headers=OPERATOR, json={"daily_usd": 50, "monthly_usd": 500})
                assert put.status_code == 200, put.text
                tenant = client.put("/v1/budgets/e2e", headers=ADMIN, json={"daily_usd": 5, "monthly_usd": 100})
                assert tenant.status_code == 200, tenant.text
                woke = client.post("/api/pods/qwen/start", headers=OPERATOR)
                assert woke.status_code == 200, woke.text
                _mark("woke")
                job = client.post("/v1/jobs/sync?machine_type=local", content=b"hello", headers=POOL)
                assert job.status_code == 200, job.text
                _mark("job")
                stopped = 'thermostat_billable_actions_total{trigger="idle", ok="true"}'
                _until("the idle stop scraped", lambda: _counted(prometheus, stopped) >= 1, timeout=30)
                _mark("idle stop")

            def every_query_answers() -> list[str]:
                exprs = [q.expr for q in dashboard_queries()] + [r["record"] for r in recordings()]
                return [expr for expr in exprs if not prometheus.query(expr)]

            empty = every_query_answers()
            if empty:  # a recording rule evaluates once a second: one more round
                time.sleep(2)
                empty = every_query_answers()
            assert empty == [], f"no series for {empty}"
            _mark("queries")

            (monitor,) = [
                c
                for c in psutil.Process(stack.proc.pid).children(recursive=True)
                if "thermostat.idle_monitor" in " ".join(c.cmdline())
            ]
            monitor.kill()

            def down_pending() -> list[dict[str, Any]]:
                return [
                    a
                    for a in prometheus.alerts()
                    if a["labels"]["alertname"] == "ThermostatServiceDown" and a["labels"]["job"] == "idle-monitor"
                ]

            (pending,) = _until("ThermostatServiceDown for the idle monitor", down_pending, timeout=15)
            assert pending["state"] == "pending"  # `for: 2m`: pending, not yet firing
            _mark("pending")
            stack.wait_for_line(r"idle-monitor restarted \(pid \d+\)")
            _until("ThermostatServiceDown resolved once the monitor is back", lambda: not down_pending())
            _mark("resolved")
            stack.interrupt()
        finally:
            stack.kill()
