"""What a stop does to the monitor's memory: refused keeps the phase and waits a full window; accepted is the
Down edge, so a re-wake inside one tick starts a new boot and a new readySince (#2052)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from tests.fixtures.services import OPERATOR
from tests.integration.idle_monitor.conftest import POD, POD_ID, MonitorRig, messages, minutes
from thermostat.pods.v1 import pods_pb2
from thermostat.policy.idle.idle_phase import Phase, StopTrigger


async def test_an_idle_stop_the_controller_reports_refused_keeps_ready_and_waits_a_full_window(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """RunPod answers the stop with a 500: the streak restarts, the phase stays Ready, 15 more minutes pass."""
    rig.add_pod(POD_ID)
    ready = (await rig.ticks(1))[0]
    assert ready.state.counters.phase is Phase.READY
    rig.sim.inject("POST", f"/v2/pods/{POD_ID}/action", status=500, count=1)

    first, refused_at, _ = await rig.tick_until_stop(limit=20)
    saved = await rig.saved()
    assert (saved.state.phase, saved.state.counters.idle_streak) == (Phase.READY, 0)
    assert rig.status(POD_ID) == "RUNNING"
    assert await rig.ready_since() is not None, "a refused stop ends nothing: the pod still serves"

    second, accepted_at, decision = await rig.tick_until_stop(limit=20)
    assert (first, second) == (15, 15)
    assert accepted_at - refused_at == minutes(15)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.IDLE
    assert rig.status(POD_ID) == "EXITED"
    assert [(s.trigger, s.ok, s.http_status) for s in await rig.stops()] == [("idle", False, 500), ("idle", True, 200)]
    assert (await rig.saved()).state.phase is Phase.DOWN
    assert len(messages(monitor_log, f"pod {POD_ID} ready after")) == 1, "ready is logged once per boot"
    assert messages(monitor_log, "idle stop of qwenpod0000001 refused; phase kept", logging.WARNING)


async def test_a_refused_boot_grace_stop_keeps_booting_and_grants_a_fresh_budget(rig: MonitorRig) -> None:
    """A never-ready pod whose stop RunPod refused is retried after another full boot grace, not every tick."""
    rig.add_pod(POD_ID, model_ready_seconds=-1)
    rig.sim.inject("POST", f"/v2/pods/{POD_ID}/action", status=409, count=1)
    first, _, _ = await rig.tick_until_stop(limit=30)
    saved = await rig.saved()
    assert (saved.state.phase, saved.state.counters.booting_ticks) == (Phase.BOOTING, 0)
    second, _, decision = await rig.tick_until_stop(limit=30)
    assert (first, second) == (20, 20)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.BOOT_GRACE
    assert rig.status(POD_ID) == "EXITED"


async def test_a_re_wake_inside_one_tick_starts_a_new_boot(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """Stopped idle, woken again before the next tick: Booting with a fresh budget, then a new readySince."""
    rig.add_pod(POD_ID)
    await rig.tick_until_stop(limit=20)
    first_ready = messages(monitor_log, f"pod {POD_ID} ready after")
    rig.sim.set_pod_lifecycle(POD_ID, model_ready_seconds=3 * 60)

    woke = await rig.pods.StartPod(pods_pb2.StartPodRequest(name=POD), metadata=OPERATOR, timeout=10)
    assert (woke.outcome, woke.pod_id) == ("Started", POD_ID)
    rewoken_at = rig.now

    decisions = await rig.ticks(3)
    assert [(d.state.phase, d.state.counters.booting_ticks, d.state.counters.idle_streak) for d in decisions] == [
        (Phase.BOOTING, 1, 0),
        (Phase.BOOTING, 2, 0),
        (Phase.BOOTING, 3, 0),
    ]
    assert await rig.ready_since() is None, "the stale Ready of the last boot is not inherited"

    ready_tick = rig.now
    decision = await rig.tick()
    assert decision.state.phase is Phase.READY
    assert await rig.ready_since() == ready_tick == rewoken_at + minutes(3)
    lines = messages(monitor_log, f"pod {POD_ID} ready after")
    assert len(first_ready) == 1 and len(lines) == 2, "ready is logged once per boot"
    assert lines[-1] == f"[RunPodIdleMonitor] pod {POD_ID} ready after 0:03:00 (boot grace 0:20:00)"

    _ticks, stopped_at, _ = await rig.tick_until_stop(limit=20)
    assert stopped_at - ready_tick == minutes(15), "the new boot's idle window starts at its own ready"


async def test_a_replica_that_lost_its_lease_mid_tick_does_not_stop_and_the_next_holder_does(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """A tick whose lease lapsed neither stops nor writes state (the new holder owns it); the holder stops."""
    rig.add_pod(POD_ID)
    await rig.ticks(15)
    decision = await rig.ticker.tick_once(rig.now, may_act=lambda: False)
    rig.advance(rig.options.check_seconds)
    assert decision is not None and decision.stop is not None
    assert rig.status(POD_ID) == "RUNNING"
    assert await rig.stops() == []
    assert messages(monitor_log, "lease no longer trusted; this tick is dropped", logging.WARNING)

    rig.ticker = rig.new_ticker("replica-b")
    _, _, decision = await rig.tick_until_stop(limit=1)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.IDLE
    assert rig.status(POD_ID) == "EXITED"


async def test_a_replica_whose_lease_lapsed_while_its_stop_was_at_runpod_leaves_the_new_holders_state(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """The stop went out under a trusted lease, which lapsed before RunPod answered, and replica B ticked in the
    meantime: the stop's aftermath is B's to write, so A's does not overwrite B's state."""
    rig.add_pod(POD_ID)
    await rig.ticks(15)
    held = rig.sim.hold("POST", f"/v2/pods/{POD_ID}/action")
    trusted = [True]
    stopping = asyncio.create_task(rig.ticker.tick_once(rig.now, may_act=lambda: trusted[0]))
    await held.reached()
    trusted[0] = False
    by_b = dataclasses.replace(await rig.saved(), ticked_by="replica-b", last_signal="BUSY")
    await rig.states.save(POD, by_b)
    held.release()
    decision = await stopping
    assert decision is not None and decision.stop is not None and decision.stop.trigger is StopTrigger.IDLE
    assert rig.status(POD_ID) == "EXITED", "the stop issued under the lease still happens"
    assert await rig.saved() == by_b
    assert messages(monitor_log, "its aftermath is the new holder's", logging.WARNING)
