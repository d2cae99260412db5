"""The stall guard and warm hours inside one monitor tick (issue 26): who is stopped, and when nothing is."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.common.pod_model import Lookup, PodObservation, PodStatus, VolumeLookup
from thermostat.policy.common.warm_hours import parse_warm_hours
from thermostat.policy.idle.idle_phase import Phase, PhaseCounters, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.monitor_tick import PodStopOutcome, StopResult, TickObservation, after_stop, tick
from thermostat.policy.idle.pod_signal import PodReading
from thermostat.policy.idle.vllm_metrics import PodActivity

# Wednesday 2026-09-09, 10:00 in Berlin (08:00 UTC): inside Mon-Fri 08:00-18:00 Europe/Berlin
WEDNESDAY_10_BERLIN = datetime(2026, 9, 9, 8, 0, tzinfo=UTC)
HOURS = parse_warm_hours("Mon-Fri 08:00-18:00 Europe/Berlin", "RUNPOD_WARM_HOURS")
OPTIONS = MonitorOptions()  # stall threshold 30, idle threshold 15


def scraped(pod: str, *, completed: float | None, active: int) -> PodReading:
    return PodReading(pod_id=pod, scrape=PodActivity(active=active, completed=completed, running=active, waiting=0))


def observed(pod: str, status: PodStatus) -> PodReading:
    return PodReading(pod_id=pod, observation=PodObservation(lookup=Lookup.FOUND, pod_id=pod, status=status))


def on_volume(*readings: PodReading) -> TickObservation:
    return TickObservation(
        volume=VolumeLookup(lookup=Lookup.FOUND, pod_ids=tuple(r.pod_id for r in readings)), pods=readings
    )


def ready(streak: int = 0, booting: int = 0, phase: Phase = Phase.READY, **pods: PodMemory) -> MonitorState:
    counters = PhaseCounters(phase=phase, idle_streak=streak, booting_ticks=booting)
    now = WEDNESDAY_10_BERLIN
    return MonitorState(counters=counters, cap_started_at=now, boot_started_at=now, pods=pods)


def stalling(ticks: int) -> PodMemory:
    return PodMemory(baseline=100.0, ready_since=WEDNESDAY_10_BERLIN, stall_ticks=ticks)


# --- the stall guard


def test_the_scrape_that_reaches_the_threshold_stops_every_up_pod_with_trigger_stall() -> None:
    decision = tick(
        ready(p1=stalling(29)), on_volume(scraped("p1", completed=100.0, active=1)), WEDNESDAY_10_BERLIN, OPTIONS
    )
    assert decision.stop is not None
    assert (decision.stop.trigger, decision.stop.pod_ids) == (StopTrigger.STALL, ("p1",))
    assert decision.stop.message == (
        "stopping p1 (stall: in flight with no work for 30 scrapes: "
        "p1 running 1, waiting 0, work counter 100 unchanged for 30 scrapes)"
    )


def test_one_scrape_short_of_the_threshold_stops_nothing() -> None:
    decision = tick(
        ready(p1=stalling(28)), on_volume(scraped("p1", completed=100.0, active=1)), WEDNESDAY_10_BERLIN, OPTIONS
    )
    assert decision.stop is None
    assert decision.state.pods["p1"].stall_ticks == 29


def test_a_sibling_that_really_works_wins_over_a_stalled_pod() -> None:
    """A busy pod anywhere wins: the stalled one is not stopped while its sibling generates tokens."""
    state = ready(p1=stalling(29), p2=PodMemory(baseline=5.0))
    observation = on_volume(scraped("p1", completed=100.0, active=1), scraped("p2", completed=9.0, active=1))
    decision = tick(state, observation, WEDNESDAY_10_BERLIN, OPTIONS)
    assert decision.stop is None
    assert decision.state.pods["p1"].stall_ticks == 30


def test_a_stalled_pod_beside_an_idle_one_stops_both() -> None:
    state = ready(p1=stalling(29), p2=PodMemory(baseline=5.0))
    observation = on_volume(scraped("p1", completed=100.0, active=1), scraped("p2", completed=5.0, active=0))
    decision = tick(state, observation, WEDNESDAY_10_BERLIN, OPTIONS)
    assert decision.stop is not None
    assert (decision.stop.trigger, decision.stop.pod_ids) == (StopTrigger.STALL, ("p1", "p2"))


def test_an_exposition_without_counters_keeps_the_seed_gauge_rule() -> None:
    """No counter family: the gauge alone says Busy, forever (until the cap), exactly as the seed did."""
    state = ready(p1=PodMemory(ready_since=WEDNESDAY_10_BERLIN))
    for minute in range(100):
        decision = tick(
            state,
            on_volume(scraped("p1", completed=None, active=1)),
            WEDNESDAY_10_BERLIN + minute * timedelta(minutes=1),
            OPTIONS,
        )
        assert decision.stop is None
        state = decision.state
    assert state.pods["p1"].stall_ticks == 0


def test_a_process_that_ended_drops_its_stall_count() -> None:
    decision = tick(ready(p1=stalling(20)), on_volume(observed("p1", PodStatus.EXITED)), WEDNESDAY_10_BERLIN, OPTIONS)
    assert "p1" not in decision.state.pods or decision.state.pods["p1"].stall_ticks == 0


def test_an_accepted_stall_stop_is_the_down_edge() -> None:
    decision = tick(
        ready(p1=stalling(29)), on_volume(scraped("p1", completed=100.0, active=1)), WEDNESDAY_10_BERLIN, OPTIONS
    )
    result = StopResult(trigger=StopTrigger.STALL, outcomes=(PodStopOutcome(pod_id="p1", ok=True),))
    aftermath = after_stop(decision.state, result, WEDNESDAY_10_BERLIN)
    assert aftermath.accepted
    assert aftermath.state.phase is Phase.DOWN


def test_the_guard_off_gives_the_seed_behaviour() -> None:
    options = MonitorOptions(stall_minutes=0)
    decision = tick(
        ready(p1=stalling(29)), on_volume(scraped("p1", completed=100.0, active=1)), WEDNESDAY_10_BERLIN, options
    )
    assert decision.stop is None
    assert decision.state.pods["p1"].stall_ticks == 0


# --- warm hours


IDLE_AT_THRESHOLD = ready(14, p1=PodMemory(baseline=5.0, ready_since=WEDNESDAY_10_BERLIN))
IDLE = on_volume(scraped("p1", completed=5.0, active=0))


@pytest.mark.parametrize(
    ("now", "stops"),
    [
        pytest.param(WEDNESDAY_10_BERLIN, False, id="inside-the-hours"),
        pytest.param(datetime(2026, 9, 9, 5, 50, tzinfo=UTC), False, id="in-the-idle-window-before-they-open"),
        pytest.param(datetime(2026, 9, 9, 5, 40, tzinfo=UTC), True, id="before-the-idle-window-before-they-open"),
        pytest.param(datetime(2026, 9, 9, 16, 0, tzinfo=UTC), True, id="at-the-end-of-the-hours"),
        pytest.param(datetime(2026, 9, 12, 8, 0, tzinfo=UTC), True, id="on-a-saturday"),
    ],
)
def test_no_idle_stop_inside_warm_hours(now: datetime, stops: bool) -> None:
    """08:00-18:00 Berlin is 06:00-16:00 UTC in September; the idle window is 15 minutes."""
    state = replace(IDLE_AT_THRESHOLD, cap_started_at=now - timedelta(hours=1))  # the cap far off
    decision = tick(state, IDLE, now, OPTIONS, warm_hours=HOURS)
    assert (decision.stop is not None) is stops
    if stops:
        assert decision.stop is not None and decision.stop.trigger is StopTrigger.IDLE
    else:
        assert decision.state.counters.idle_streak == 15  # it keeps counting: the first idle tick after stops


def test_the_stall_guard_still_stops_inside_warm_hours() -> None:
    decision = tick(
        ready(p1=stalling(29)),
        on_volume(scraped("p1", completed=100.0, active=1)),
        WEDNESDAY_10_BERLIN,
        OPTIONS,
        warm_hours=HOURS,
    )
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.STALL


def test_boot_grace_still_stops_inside_warm_hours() -> None:
    state = ready(booting=19, phase=Phase.BOOTING)
    decision = tick(state, on_volume(observed("p1", PodStatus.RUNNING)), WEDNESDAY_10_BERLIN, OPTIONS, warm_hours=HOURS)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.BOOT_GRACE


def test_the_runtime_cap_still_stops_inside_warm_hours() -> None:
    state = ready(14, p1=PodMemory(baseline=5.0, ready_since=WEDNESDAY_10_BERLIN))
    later = WEDNESDAY_10_BERLIN + timedelta(hours=6)
    decision = tick(state, IDLE, later, OPTIONS, warm_hours=HOURS)
    assert decision.stop is not None and decision.stop.trigger is StopTrigger.RUNTIME_CAP
