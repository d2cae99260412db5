"""The idle monitor's metrics: each tick sets the pod's phase and counters as it decided them, each vLLM scrape is
timed by its result, a replica that stops ticking a pod drops its series; the monitor's /metrics over HTTP shows
them and a monitor lease taken from a dead replica, every family as docs/operations.md documents it."""

from __future__ import annotations

from datetime import timedelta

from tests.fixtures.metrics import Family, assert_documented, parse, scrape
from tests.fixtures.polling import eventually
from tests.fixtures.services import VOLUME, pod_controller_env, start_pod_controller
from tests.integration.idle_monitor.conftest import POD, POD_ID, MakeRig, MonitorRig, in_process_monitor
from tests.integration.idle_monitor.test_disabled_until_configured import monitor_env, watching
from thermostat.dev.simulators.runpod.server import RunPodSimulator
from thermostat.idle_monitor.metrics import MonitorMetrics
from thermostat.store.db import Store


async def _exposed(metrics: MonitorMetrics) -> dict[str, Family]:
    body, _ = await metrics.metrics.exposition()
    return parse(body.decode())


async def test_each_tick_sets_the_phase_and_the_idle_streak_it_decided_and_times_each_scrape(rig: MonitorRig) -> None:
    """A ready pod nobody uses, ticked four times: READY (and only READY) is 1, the idle streak is what the tick
    saved, four scrapes answered."""
    rig.add_pod(POD_ID)
    await rig.ticks(4)
    families = await _exposed(rig.ticker.metrics)
    phase = families["thermostat_monitor_phase"]
    assert {p: phase.value(pod=POD, phase=p) for p in ("DOWN", "BOOTING", "READY")} == {
        "DOWN": 0,
        "BOOTING": 0,
        "READY": 1,
    }
    saved = (await rig.saved()).state.counters
    assert saved.idle_streak >= 1
    assert families["thermostat_monitor_idle_streak_ticks"].value(pod=POD) == saved.idle_streak
    assert families["thermostat_monitor_booting_ticks"].value(pod=POD) == saved.booting_ticks
    assert families["thermostat_monitor_scrape_seconds"].value(result="answered") == 4
    assert_documented(families)


async def test_a_replica_that_stops_ticking_a_pod_drops_its_series(rig: MonitorRig) -> None:
    rig.add_pod(POD_ID)
    await rig.tick()
    rig.ticker.metrics.forget(POD)
    families = await _exposed(rig.ticker.metrics)
    assert families["thermostat_monitor_phase"].samples == ()
    assert families["thermostat_monitor_idle_streak_ticks"].samples == ()


async def test_the_monitor_serves_its_metrics_over_http_and_counts_a_monitor_lease_taken_from_a_dead_replica(
    runpod_sim: RunPodSimulator, db_store: Store
) -> None:
    """monitor:qwen held by a replica that died (expired, never released): the monitor takes it over (counted
    once) and ticks; its /metrics shows the pod's phase and the scrapes, until it stops ticking the pod."""
    await db_store.pool.execute(
        "INSERT INTO leases (name, holder, term, acquired_at, renewed_at, expires_at) VALUES ($1, 'dead-replica', 1, "
        "now() - interval '2 minutes', now() - interval '2 minutes', now() - interval '1 minute')",
        f"monitor:{POD}",
    )
    runpod_sim.add_pod(pod_id=POD_ID, status="RUNNING", volume_id=VOLUME)
    async with (
        start_pod_controller(pod_controller_env(runpod_sim), db_store) as controller,
        in_process_monitor(monitor_env(runpod_sim, controller.address, CHECK_SECONDS="0.1"), db_store) as monitor,
    ):
        await eventually(lambda: watching(monitor), timeout=20)
        families = await scrape(monitor.monitor.host.metrics_port)
        registry = monitor.monitor.host.spec.metrics
    # stopped, the monitor no longer ticks the pod: its leader dropped the pod's series as it let the lease go
    after = parse((await registry.exposition())[0].decode())
    assert after["thermostat_monitor_phase"].samples == ()
    assert sum(s.value for s in families["thermostat_monitor_phase"].samples if s.labels["pod"] == POD) == 1
    assert families["thermostat_monitor_scrape_seconds"].value(result="answered") >= 1
    assert families["thermostat_lease_takeovers_total"].value(lease="monitor") == 1
    assert_documented(families)


async def test_the_runtime_gauge_counts_from_the_cap_clock_the_tick_armed_and_goes_when_the_pod_is_down(
    rig: MonitorRig,
) -> None:
    """A ready pod ticked four times a minute apart: its runtime is three minutes from the start the tick saved,
    its cap six hours; idle-stopped and ticked down, the runtime series goes and the cap stays."""
    rig.add_pod(POD_ID)
    await rig.ticks(4)
    started = (await rig.saved()).state.cap_started_at
    assert started is not None
    last_tick = rig.now - timedelta(seconds=rig.options.check_seconds)
    families = await _exposed(rig.ticker.metrics)
    assert families["thermostat_monitor_runtime_seconds"].value(pod=POD) == (last_tick - started).total_seconds() == 180
    assert families["thermostat_monitor_runtime_cap_seconds"].value(pod=POD) == 6 * 3600
    assert_documented(families)

    await rig.tick_until_stop(limit=20)
    await rig.tick()  # the pod reads NotRunning: the clock is disarmed
    assert (await rig.saved()).state.cap_started_at is None
    families = await _exposed(rig.ticker.metrics)
    assert families["thermostat_monitor_runtime_seconds"].samples == ()
    assert families["thermostat_monitor_runtime_cap_seconds"].value(pod=POD) == 6 * 3600

    rig.ticker.metrics.forget(POD)
    assert (await _exposed(rig.ticker.metrics))["thermostat_monitor_runtime_cap_seconds"].samples == ()


async def test_a_disabled_runtime_cap_exports_no_cap_series(make_rig: MakeRig) -> None:
    """MAX_RUNTIME_MINUTES=0: the runtime still counts, the cap (and so the near-the-cap alert) has no series."""
    rig = await make_rig(MAX_RUNTIME_MINUTES="0")
    rig.add_pod(POD_ID)
    await rig.ticks(2)
    families = await _exposed(rig.ticker.metrics)
    assert families["thermostat_monitor_runtime_seconds"].value(pod=POD) == 60
    assert families["thermostat_monitor_runtime_cap_seconds"].samples == ()
