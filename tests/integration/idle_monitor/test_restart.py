"""A restarted monitor continues exactly where it was: the phase, streaks, baselines, readiness and the
runtime-cap start live in Postgres. The pod-control seed's in-process cap re-armed on every conductor restart; ours does
not."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from tests.fixtures.postgres import open_store
from tests.integration.idle_monitor.conftest import POD_ID, MakeRig, MonitorRig, minutes
from thermostat.idle_monitor.repository import MonitorRepository
from thermostat.idle_monitor.scrape_clients import ScrapeClients
from thermostat.policy.idle.idle_phase import Phase, StopTrigger


@contextlib.asynccontextmanager
async def restarted(rig: MonitorRig, database_url: str) -> AsyncIterator[None]:
    """A new process's worth of monitor: its own pools, its own HTTP client, nothing carried in memory."""
    store = await open_store(database_url, max_size=2, application_name="restarted-monitor")
    try:
        async with ScrapeClients() as scrapes:
            rig.ticker = rig.new_ticker("replica-after-restart", states=MonitorRepository(store.pool), scrapes=scrapes)
            yield
    finally:
        await store.close()


async def test_a_restart_keeps_the_runtime_cap_start(make_rig: MakeRig, database_url: str) -> None:
    """Phantom busy for 10 minutes, restart, and the 30-minute cap still fires 30 minutes after the first tick."""
    rig = await make_rig(MAX_RUNTIME_MINUTES="30")
    rig.add_pod(POD_ID)
    rig.sim.set_in_flight(POD_ID, running=1)
    first_seen = rig.now
    await rig.ticks(10)
    assert (await rig.saved()).state.cap_started_at == first_seen

    async with restarted(rig, database_url):
        await rig.tick()
        saved = await rig.saved()
        assert saved.state.cap_started_at == first_seen
        _ticks, stopped_at, decision = await rig.tick_until_stop(limit=40)

    assert stopped_at - first_seen == minutes(30)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.RUNTIME_CAP
    assert rig.status(POD_ID) == "EXITED"


@pytest.mark.parametrize("before_restart", [pytest.param(1, id="right-after-ready"), pytest.param(9, id="mid-streak")])
async def test_a_restart_continues_the_idle_streak_and_keeps_readiness(
    rig: MonitorRig, database_url: str, before_restart: int
) -> None:
    """The streak, the work-counter baseline and readySince survive: the stop comes on the same minute."""
    rig.add_pod(POD_ID)
    ready_tick = rig.now
    await rig.ticks(before_restart)
    ready = await rig.ready_since()
    async with restarted(rig, database_url):
        decision = await rig.tick()
        assert decision.state.phase is Phase.READY
        assert decision.state.counters.idle_streak == before_restart, "no re-seeded baseline, no reset streak"
        assert not decision.readiness, "nothing to publish again: the pod was ready before the restart"
        _, stopped_at, _ = await rig.tick_until_stop(limit=20)
    assert ready == ready_tick
    assert stopped_at - ready_tick == minutes(15)
    assert (await rig.saved()).ticked_by == "replica-after-restart"
