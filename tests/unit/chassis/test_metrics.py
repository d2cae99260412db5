"""The chassis's metrics: a registry per service, gauges refreshed on scrape within a bound, docs/operations.md's table
naming exactly the families the services export."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.fixtures.metrics import documented, parse
from thermostat.chassis.metrics import Metrics
from thermostat.gateway.metrics import GatewayMetrics
from thermostat.idle_monitor.metrics import MonitorMetrics
from thermostat.metering.metrics import MeteringMetrics
from thermostat.pod_controller.metrics import PodMetrics
from thermostat.pool_dispatcher.metrics import PoolMetrics

EVERY_SERVICE = "every service"


def _capped_pool(metrics: Metrics) -> None:
    """The pool's families with its fleet cap set (the cap's gauge is exported only then)."""
    PoolMetrics(metrics).fleet_capped(8)


SERVICES: dict[str, Callable[[Metrics], object]] = {
    "pod-controller": PodMetrics,
    "idle-monitor": MonitorMetrics,
    "pool-dispatcher": _capped_pool,
    "metering": MeteringMetrics,
    "gateway": GatewayMetrics,
}


async def _families(declare: Callable[[Metrics], object]) -> dict[str, str]:
    metrics = Metrics()
    declare(metrics)
    body, _ = await metrics.exposition()
    return {name: family.type for name, family in parse(body.decode()).items() if name.startswith("thermostat_")}


async def test_the_docs_name_every_exported_family_with_its_type_and_the_services_that_export_it() -> None:
    rows = documented()
    exported: dict[str, set[str]] = {}
    for service, declare in SERVICES.items():
        for name, kind in (await _families(declare)).items():
            assert name in rows, f"{service} exports {name}, which docs/operations.md's metrics table does not name"
            assert rows[name].type == kind, f"{name}: exported as a {kind}, docs/operations.md says {rows[name].type}"
            exported.setdefault(name, set()).add(service)
    assert set(rows) == set(exported), (
        f"docs/operations.md names families no service exports: {set(rows) - set(exported)}"
    )
    for name, services in exported.items():
        expected = EVERY_SERVICE if services == set(SERVICES) else ", ".join(sorted(services))
        assert rows[name].served_by == expected, (
            f"{name}: served by {sorted(services)}, docs/operations.md says {rows[name]}"
        )


def test_every_documented_name_carries_its_unit_or_is_a_count() -> None:
    """Prometheus naming: a counter ends in _total; any other family in its unit (seconds, USD, ticks, events),
    unless it counts things (jobs, machines, the machine cap, held requests) or is a state set (the monitor's phase)."""
    counts = {
        "thermostat_pool_jobs",
        "thermostat_pool_machines",
        "thermostat_pool_fleet_cap",
        "thermostat_monitor_phase",
        "thermostat_gateway_held_requests",
    }
    for name, row in documented().items():
        if row.type == "counter":
            assert name.endswith("_total"), name
        elif name not in counts:
            assert name.endswith(("_seconds", "_usd", "_ticks", "_events")), name


async def test_two_services_in_one_process_count_apart() -> None:
    """Each service has its own registry: the same family declared twice neither collides nor mixes counts."""
    first, second = PodMetrics(Metrics()), PodMetrics(Metrics())
    first.wake("Succeeded", "Started", 0.5)
    assert parse((await first.metrics.exposition())[0].decode())["thermostat_wakes_total"].value() == 1
    assert parse((await second.metrics.exposition())[0].decode())["thermostat_wakes_total"].samples == ()


async def test_a_gauge_is_refreshed_before_each_scrape() -> None:
    metrics = Metrics()
    gauge = metrics.gauge("thermostat_test_value", "a test value")
    reads = iter([1.0, 2.0])

    async def refresh() -> None:
        gauge.set(next(reads))

    metrics.on_scrape("test", refresh)
    assert parse((await metrics.exposition())[0].decode())["thermostat_test_value"].value() == 1.0
    assert parse((await metrics.exposition())[0].decode())["thermostat_test_value"].value() == 2.0


@pytest.mark.parametrize("failure", ["raises", "hangs"])
async def test_a_refresh_that_fails_or_hangs_serves_the_last_values_and_counts_the_failure(failure: str) -> None:
    """A store that errors, or never answers (bounded by the refresh timeout): the scrape still answers."""
    metrics = Metrics(refresh_timeout=0.05)
    gauge = metrics.gauge("thermostat_test_value", "a test value")
    gauge.set(7)
    never = asyncio.Event()

    async def refresh() -> None:
        if failure == "raises":
            raise ConnectionError("store down")
        await never.wait()

    metrics.on_scrape("store", refresh)
    families = parse((await metrics.exposition())[0].decode())
    assert families["thermostat_test_value"].value() == 7
    assert families["thermostat_metrics_refresh_failures_total"].value(refresh="store") == 1


async def test_openmetrics_is_served_when_the_scraper_asks_for_it() -> None:
    metrics = Metrics()
    body, content_type = await metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    _, plain = await metrics.exposition(None)
    assert plain.startswith("text/plain")
