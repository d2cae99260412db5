"""Metering's /metrics over HTTP and its part of GET /health: the ledger's lag per feed moves as the feed is
read (entries behind mid-catch-up, none once caught up; seconds since the last successful read growing while the
controller is gone), entries landed, spend and what is left of each budget; every family in docs/operations.md."""

from __future__ import annotations

import json

from tests.fixtures.metrics import Family, assert_documented, scrape
from tests.fixtures.polling import eventually
from tests.fixtures.services import (
    OPERATOR,
    RunningService,
    metering_env,
    pod_controller_env,
    start_metering,
    start_pod_controller,
)
from tests.integration.metering.conftest import stored_position, write_actions
from tests.integration.pool_dispatcher.conftest import ADMIN, ADMIN_TOKEN
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.metering.ledger import POD_ACTIONS, Feed, Page
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.store.db import Store

FEED = {"feed": POD_ACTIONS}


async def _health(metering: RunningService) -> dict[str, dict[str, object]]:
    async with metering.channel() as channel:
        body = await metering_pb2_grpc.MeteringStub(channel).GetMeteringHealthJson(
            metering_pb2.GetMeteringHealthJsonRequest(), timeout=10
        )
    assert body.content_type == "application/json"
    return {entry["feed"]: entry for entry in json.loads(body.data)["ledger"]}


async def test_the_ledger_lag_gauges_move_as_the_feed_is_read_and_grow_while_it_cannot_be(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """Thirty actions read ten at a time: after the first page 20 behind; caught up, 0 behind and 30 landed, in
    /metrics and in the health detail alike. The controller gone, the read fails: the detail says why and the
    seconds since the last successful read grow."""
    await write_actions(db_store.pool, 30)
    mid: dict[str, Family] = {}
    metrics_port: list[int | None] = []

    async def look_after_the_first_page(_feed: Feed, page: Page) -> None:
        if page.through == 20 and not mid:  # the second page was read: the first one has landed
            mid.update(await scrape(metrics_port[0]))

    async with start_pod_controller(pod_controller_env(runpod_sim), db_store) as controller:
        env = metering_env(controller.address, LEDGER_PAGE_SIZE="10", FEED_TIMEOUT_SECONDS="0.3")
        async with start_metering(env, db_store, after_read=look_after_the_first_page) as metering:
            metrics_port.append(metering.host.metrics_port)
            await eventually(lambda: _at(db_store, 30), timeout=30, every=0.05)
            caught_up = await scrape(metering.host.metrics_port)
            healthy = (await _health(metering))[POD_ACTIONS]
            await controller.host.stop(0.5)

            async def failed() -> dict[str, object] | None:
                entry = (await _health(metering))[POD_ACTIONS]
                return entry if entry["error"] else None

            broken = await eventually(failed, timeout=30, every=0.05)
            later = await scrape(metering.host.metrics_port)
    assert mid["thermostat_ledger_lag_events"].value(**FEED) == 20
    assert mid["thermostat_ledger_entries_landed_total"].value(**FEED) == 10
    assert caught_up["thermostat_ledger_lag_events"].value(**FEED) == 0
    assert caught_up["thermostat_ledger_entries_landed_total"].value(**FEED) == 30
    assert 0 <= caught_up["thermostat_ledger_lag_seconds"].value(**FEED) < 30
    assert (healthy["position"], healthy["head_position"], healthy["lag_events"], healthy["error"]) == (30, 30, 0, "")
    assert isinstance(healthy["lag_seconds"], float)
    assert "unreadable" in str(broken["error"])
    assert float(broken["lag_seconds"]) > float(healthy["lag_seconds"])  # type: ignore[arg-type]
    assert later["thermostat_ledger_lag_seconds"].value(**FEED) > caught_up["thermostat_ledger_lag_seconds"].value(
        **FEED
    )
    assert_documented(later)


async def _at(store: Store, position: int) -> bool | None:
    return True if await stored_position(store.pool) >= position else None


async def test_spend_and_what_is_left_of_each_budget_are_exported_per_pod_and_per_tenant(
    pod_controller: RunningService, db_store: Store
) -> None:
    """A pod budget of 100 a day and a tenant's of 5 a day and 50 a month: each pod's spend per period, and the
    remaining amount only under a ceiling that is set."""
    env = metering_env(pod_controller.address, STRATA_POOL_ADMIN_TOKEN=ADMIN_TOKEN)
    async with start_metering(env, db_store) as metering, metering.channel() as channel:
        stub = metering_pb2_grpc.MeteringStub(channel)
        await stub.SetPodBudget(metering_pb2.SetPodBudgetRequest(name="qwen", daily_usd=100), metadata=OPERATOR)
        await stub.SetTenantBudget(
            metering_pb2.SetTenantBudgetRequest(tenant_id="acme", daily_usd=5, monthly_usd=50), metadata=ADMIN
        )
        families = await scrape(metering.host.metrics_port)
    spend, remaining = families["thermostat_spend_usd"], families["thermostat_budget_remaining_usd"]
    pod_today = spend.value(subject="pod", name="qwen", period="day")
    assert remaining.value(subject="pod", name="qwen", period="day") == 100 - pod_today
    assert ("pod", "qwen", "month") not in {
        (s.labels["subject"], s.labels["name"], s.labels["period"]) for s in remaining.samples
    }
    assert spend.value(subject="tenant", name="acme", period="month") == 0
    assert remaining.value(subject="tenant", name="acme", period="day") == 5
    assert remaining.value(subject="tenant", name="acme", period="month") == 50
    assert_documented(families)
