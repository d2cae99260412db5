"""A stale pod and its replacement on one volume (after a Waiting wake or a refused terminate): every pod is
scraped, a busy one anywhere wins, an idle stop stops every pod that is up, and each tick warns."""

from __future__ import annotations

import logging

import pytest

from tests.integration.idle_monitor.conftest import FRESH_ID, STALE_ID, MakeRig, MonitorRig, messages
from thermostat.policy.idle.idle_phase import Phase, StopTrigger
from thermostat.policy.idle.pod_signal import PodSignal


async def test_a_busy_sibling_wins_over_an_idle_stale_pod(
    rig: MonitorRig, monitor_log: pytest.LogCaptureFixture
) -> None:
    """The stale pod, listed first, is idle for 40 minutes; the busy replacement keeps both up."""
    rig.add_pod(STALE_ID)
    rig.add_pod(FRESH_ID)
    await rig.tick()
    for _ in range(40):
        rig.sim.record_turn(FRESH_ID, prompt_tokens=700, gen_tokens=120)
        decision = await rig.tick()
        assert (decision.signal.signal, decision.signal.pod_id) == (PodSignal.BUSY, FRESH_ID)
        assert [v.signal for v in decision.verdicts] == [PodSignal.IDLE, PodSignal.BUSY]
        assert decision.stop is None
    assert (rig.status(STALE_ID), rig.status(FRESH_ID)) == ("RUNNING", "RUNNING")
    assert await rig.stops() == []
    warnings = messages(monitor_log, "2 pods on the volume", logging.WARNING)
    assert len(warnings) == 41, "a warning on every tick while more than one pod is on the volume"
    assert warnings[-1] == f"[RunPodIdleMonitor] 2 pods on the volume ({STALE_ID}, {FRESH_ID}); BUSY from {FRESH_ID}"


async def test_an_idle_stop_stops_every_pod_that_is_up(rig: MonitorRig, monitor_log: pytest.LogCaptureFixture) -> None:
    """Both pods idle: one stop, naming both, and both stop billing."""
    rig.add_pod(STALE_ID)
    rig.add_pod(FRESH_ID)
    ticks, _, decision = await rig.tick_until_stop(limit=20)
    assert ticks == 16, "the seeding ready tick, then 15 idle minutes"
    assert decision.stop is not None and decision.stop.pod_ids == (STALE_ID, FRESH_ID)
    assert (rig.status(STALE_ID), rig.status(FRESH_ID)) == ("EXITED", "EXITED")
    assert sorted((s.pod_id, s.trigger, s.ok) for s in await rig.stops()) == [
        (FRESH_ID, "idle", True),
        (STALE_ID, "idle", True),
    ]
    assert messages(monitor_log, f"stopping {STALE_ID}, {FRESH_ID} (idle: idle streak 15/15)", logging.WARNING)


async def test_a_dead_stale_pod_listed_first_neither_hides_nor_joins_the_replacements_stop(rig: MonitorRig) -> None:
    """An EXITED stale pod first in the list does not read NotRunning for the volume; only the up pod is stopped."""
    rig.add_pod(STALE_ID, status="EXITED")
    rig.add_pod(FRESH_ID)
    ticks, _, decision = await rig.tick_until_stop(limit=20)
    assert ticks == 16
    assert decision.signal.pod_id == FRESH_ID
    assert decision.stop is not None and decision.stop.pod_ids == (FRESH_ID,)
    assert [(s.pod_id, s.trigger) for s in await rig.stops()] == [(FRESH_ID, "idle")]


async def test_the_runtime_cap_stops_every_pod_on_the_volume_even_a_busy_one(make_rig: MakeRig) -> None:
    """Phantom busy on the replacement, idle stale pod: the cap stops both."""
    rig = await make_rig(MAX_RUNTIME_MINUTES="10")
    rig.add_pod(STALE_ID)
    rig.add_pod(FRESH_ID)
    rig.sim.set_in_flight(FRESH_ID, running=1)
    ticks, _, decision = await rig.tick_until_stop(limit=20)
    assert ticks == 11
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.RUNTIME_CAP
    assert decision.stop.pod_ids == (STALE_ID, FRESH_ID)
    assert (rig.status(STALE_ID), rig.status(FRESH_ID)) == ("EXITED", "EXITED")


async def test_a_partly_refused_stop_keeps_the_phase_and_the_next_window_stops_the_rest(rig: MonitorRig) -> None:
    """RunPod refuses the stale pod's stop: the replacement stays stopped, the stale one goes a window later."""
    rig.add_pod(STALE_ID)
    rig.add_pod(FRESH_ID)
    rig.sim.inject("POST", f"/v2/pods/{STALE_ID}/action", status=500, count=1)
    first, _, _ = await rig.tick_until_stop(limit=20)
    assert (rig.status(STALE_ID), rig.status(FRESH_ID)) == ("RUNNING", "EXITED")
    saved = await rig.saved()
    assert (saved.state.phase, saved.state.counters.idle_streak) == (Phase.READY, 0)
    assert set(saved.state.pods) == {STALE_ID}, "the stopped pod's baseline and readiness are gone"

    second, _, decision = await rig.tick_until_stop(limit=20)
    assert (first, second) == (16, 15)
    assert decision.stop is not None and decision.stop.pod_ids == (STALE_ID,)
    assert rig.status(STALE_ID) == "EXITED"
    stops = [(s.pod_id, s.ok) for s in await rig.stops()]
    assert sorted(stops[:2]) == [(FRESH_ID, True), (STALE_ID, False)], "the first stop named both, concurrently"
    assert stops[2:] == [(STALE_ID, True)]
