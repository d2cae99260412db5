"""The idle window counts idle time only: chat turns between ticks are busy (#2075) and the model load is not
idle (#2052). Real controller, real Postgres, the simulator's vLLM; one tick per simulated minute."""

from __future__ import annotations

import logging

import pytest

from tests.integration.idle_monitor.conftest import POD_ID, MakeRig, MonitorRig, messages, minutes
from thermostat.policy.idle.activity import ActivityReason
from thermostat.policy.idle.idle_phase import Phase, StopTrigger
from thermostat.policy.idle.pod_signal import PodSignal


@pytest.mark.parametrize(
    "every", [pytest.param(1, id="a-turn-every-minute"), pytest.param(7, id="a-turn-every-seven-minutes")]
)
async def test_chat_turns_that_fall_between_ticks_keep_the_pod_up(rig: MonitorRig, every: int) -> None:
    """Turns that start and end between two scrapes never show in the gauges, yet each resets the streak."""
    rig.add_pod(POD_ID)
    await rig.tick()
    for minute in range(1, 46):
        if minute % every == 0:
            rig.sim.record_turn(POD_ID, prompt_tokens=1200, gen_tokens=350)
        decision = await rig.tick()
        (verdict,) = decision.verdicts
        if minute % every == 0:
            assert (decision.signal.signal, verdict.reason) == (PodSignal.BUSY, ActivityReason.COUNTER_ADVANCED)
            assert decision.state.counters.idle_streak == 0
        assert decision.stop is None
    assert rig.status(POD_ID) == "RUNNING"
    assert await rig.stops() == []


async def test_a_pod_used_every_few_minutes_is_never_stopped_mid_conversation(rig: MonitorRig) -> None:
    """An hour of turns four minutes apart never stops the pod; it stops a full IDLE_MINUTES after the last."""
    rig.add_pod(POD_ID)
    await rig.tick()
    ready = await rig.ready_since()
    assert ready is not None
    for minute in range(1, 61):
        if minute % 4 == 0:
            rig.sim.record_turn(POD_ID, prompt_tokens=900, gen_tokens=300)
        decision = await rig.tick()
        assert decision.stop is None
        assert decision.state.counters.idle_streak <= 3
    last_turn_seen = rig.now - minutes(1)
    # 2026-09-11: the pod was stopped exactly IDLE_MINUTES after ready, the answered turn moving nothing
    assert rig.now - ready > minutes(60)
    assert rig.status(POD_ID) == "RUNNING"

    ticks, stopped_at, decision = await rig.tick_until_stop(limit=20)

    assert stopped_at - last_turn_seen == minutes(15)
    assert ticks == 15
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.IDLE
    assert rig.status(POD_ID) == "EXITED"
    assert [(s.pod_id, s.trigger, s.ok) for s in await rig.stops()] == [(POD_ID, "idle", True)]


async def test_model_load_is_not_billed_as_idle(rig: MonitorRig, monitor_log: pytest.LogCaptureFixture) -> None:
    """Six minutes of model load are Booting; the idle window of 15 minutes starts at model-ready (#2052)."""
    rig.add_pod(POD_ID, model_ready_seconds=6 * 60)
    running_at = rig.now
    for booting_tick in range(1, 7):
        decision = await rig.tick()
        assert decision.signal.signal is PodSignal.UNREACHABLE_BUT_RUNNING
        assert decision.state.counters.phase is Phase.BOOTING
        assert decision.state.counters.booting_ticks == booting_tick
        assert decision.state.counters.idle_streak == 0
        view = await rig.view()
        assert view.is_running and not view.HasField("ready_since"), "RUNNING while loading is not usable"

    ready_tick = rig.now
    decision = await rig.tick()
    assert decision.state.counters.phase is Phase.READY
    assert decision.state.counters.idle_streak == 0, "the first scrape seeds the baseline: no idle evidence"
    assert await rig.ready_since() == ready_tick

    _ticks, stopped_at, decision = await rig.tick_until_stop(limit=20)

    assert stopped_at - ready_tick == minutes(15), "the whole idle window, counted from model-ready"
    assert stopped_at - running_at == minutes(21)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.IDLE
    assert rig.status(POD_ID) == "EXITED"
    assert await rig.ready_since() is None
    assert messages(monitor_log, f"pod {POD_ID} ready after 0:06:00 (boot grace 0:20:00)", logging.INFO) == [
        f"[RunPodIdleMonitor] pod {POD_ID} ready after 0:06:00 (boot grace 0:20:00)"
    ]
    (stop_line,) = messages(monitor_log, "stopping", logging.WARNING)
    assert stop_line == f"pod qwen: stopping {POD_ID} (idle: idle streak 15/15)"


async def test_a_woken_pod_nobody_talks_to_stops_once_the_window_has_passed(make_rig: MakeRig) -> None:
    """Fractional timings: 1.5 idle minutes at 30 s is a three-tick window after the seeding ready tick."""
    rig = await make_rig(IDLE_MINUTES="1.5", CHECK_SECONDS="30")
    rig.add_pod(POD_ID)
    ready_tick = rig.now
    decisions = await rig.ticks(4)
    assert [d.state.counters.idle_streak for d in decisions] == [0, 1, 2, 3]
    assert [d.stop is not None for d in decisions] == [False, False, False, True]
    assert rig.now - ready_tick == minutes(2)
    assert rig.status(POD_ID) == "EXITED"
