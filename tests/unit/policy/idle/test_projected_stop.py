"""When the monitor would stop a pod if nothing changed: one test per row of the projected-stop table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from thermostat.policy.common.warm_hours import parse_warm_hours
from thermostat.policy.idle.idle_phase import Phase, PhaseCounters, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState, PodMemory
from thermostat.policy.idle.monitor_watch import Watch
from thermostat.policy.idle.pod_signal import PodSignal
from thermostat.policy.idle.projected_stop import ProjectedStop, project_stop

LAST_TICK = datetime(2026, 9, 9, 9, 0, tzinfo=UTC)
# thresholds of 15 idle ticks and 20 boot ticks; no cap unless a test arms one
NO_CAP = MonitorOptions(idle_minutes=15, check_seconds=60, boot_grace_minutes=20, max_runtime_minutes=0)


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def ready(streak: int, *, cap_started_at: datetime | None = None) -> MonitorState:
    return MonitorState(counters=PhaseCounters(phase=Phase.READY, idle_streak=streak), cap_started_at=cap_started_at)


def booting(ticks: int, *, cap_started_at: datetime | None = None) -> MonitorState:
    return MonitorState(counters=PhaseCounters(phase=Phase.BOOTING, booting_ticks=ticks), cap_started_at=cap_started_at)


def project(
    state: MonitorState,
    last_signal: PodSignal | str,
    options: MonitorOptions = NO_CAP,
    *,
    ticked: bool = True,
    watch: Watch = Watch.WATCHING,
) -> ProjectedStop | None:
    return project_stop(
        state, watch=watch, last_tick_at=LAST_TICK if ticked else None, last_signal=str(last_signal), options=options
    )


def test_a_pod_this_replica_does_not_watch_projects_nothing() -> None:
    """Waiting for the controller, disabled until configured or unknown to it: no tick moves the state."""
    for watch in (Watch.WAITING, Watch.DISABLED, Watch.UNKNOWN_NAME):
        assert project(ready(14), PodSignal.IDLE, watch=watch) is None, watch


def test_nothing_is_projected_before_the_first_tick() -> None:
    assert project(ready(3), PodSignal.IDLE, ticked=False) is None


def test_a_ready_pod_with_an_idle_streak_stops_on_the_tick_that_reaches_the_threshold() -> None:
    """Streak 1 of 15: fourteen more idle ticks."""
    assert project(ready(1), PodSignal.IDLE) == ProjectedStop(at=LAST_TICK + minutes(14), trigger=StopTrigger.IDLE)


def test_a_ready_pod_running_without_metrics_accrues_like_an_idle_one() -> None:
    """UnreachableButRunning is billed, so it counts toward the idle stop."""
    projected = project(ready(5), PodSignal.UNREACHABLE_BUT_RUNNING)
    assert projected == ProjectedStop(at=LAST_TICK + minutes(10), trigger=StopTrigger.IDLE)


def test_an_unknown_tick_after_an_idle_one_keeps_the_idle_projection() -> None:
    """Unknown holds the streak, so a streak above 0 says the last counting tick accrued."""
    assert project(ready(3), PodSignal.UNKNOWN) == ProjectedStop(at=LAST_TICK + minutes(12), trigger=StopTrigger.IDLE)


def test_a_ready_pod_whose_idle_tick_has_not_yet_counted_projects_one_from_its_signal() -> None:
    """Streak 0 read with an Idle last signal (e.g. a refused idle stop reset it): fifteen ticks from now."""
    assert project(ready(0), PodSignal.IDLE) == ProjectedStop(at=LAST_TICK + minutes(15), trigger=StopTrigger.IDLE)


def test_a_busy_ready_pod_projects_no_idle_stop() -> None:
    assert project(ready(0), PodSignal.BUSY) is None


def test_a_ready_pod_with_no_streak_and_an_unknown_signal_projects_no_idle_stop() -> None:
    """Busy reset the streak, then Unknown held it at 0: the last counting tick was Busy."""
    assert project(ready(0), PodSignal.UNKNOWN) is None


def test_a_streak_at_or_past_its_threshold_projects_the_next_tick() -> None:
    """A stop that was due already (refused or raced) still lands on a tick after the last one."""
    assert project(ready(15), PodSignal.IDLE) == ProjectedStop(at=LAST_TICK + minutes(1), trigger=StopTrigger.IDLE)
    assert project(ready(40), PodSignal.IDLE) == ProjectedStop(at=LAST_TICK + minutes(1), trigger=StopTrigger.IDLE)


def test_a_booting_pod_stops_on_the_tick_that_uses_up_the_boot_grace() -> None:
    """Boot tick 4 of 20: sixteen more."""
    projected = project(booting(4), PodSignal.BOOTING)
    assert projected == ProjectedStop(at=LAST_TICK + minutes(16), trigger=StopTrigger.BOOT_GRACE)


def test_a_booting_pod_past_its_grace_projects_the_next_tick() -> None:
    projected = project(booting(25), PodSignal.BOOTING)
    assert projected == ProjectedStop(at=LAST_TICK + minutes(1), trigger=StopTrigger.BOOT_GRACE)


def test_a_booting_pod_projects_no_stop_when_the_boot_grace_is_off() -> None:
    no_grace = MonitorOptions(idle_minutes=15, check_seconds=60, boot_grace_minutes=0, max_runtime_minutes=0)
    assert project(booting(4), PodSignal.BOOTING, no_grace) is None


def test_a_down_pod_projects_nothing() -> None:
    assert project(MonitorState(), PodSignal.NOT_RUNNING) is None


def test_the_cap_projects_the_first_tick_at_or_after_its_deadline() -> None:
    """A 12.5-minute cap armed at the last tick fires on the 13th minute's tick at CHECK_SECONDS=60."""
    cap = MonitorOptions(idle_minutes=15, check_seconds=60, boot_grace_minutes=20, max_runtime_minutes=12.5)
    projected = project(ready(0, cap_started_at=LAST_TICK), PodSignal.BUSY, cap)
    assert projected == ProjectedStop(at=LAST_TICK + minutes(13), trigger=StopTrigger.RUNTIME_CAP)


def test_a_cap_deadline_that_falls_on_a_tick_projects_that_tick() -> None:
    cap = MonitorOptions(idle_minutes=15, check_seconds=60, boot_grace_minutes=20, max_runtime_minutes=360)
    projected = project(ready(0, cap_started_at=LAST_TICK - minutes(300)), PodSignal.BUSY, cap)
    assert projected == ProjectedStop(at=LAST_TICK + minutes(60), trigger=StopTrigger.RUNTIME_CAP)


def test_a_cap_deadline_already_past_projects_the_next_tick() -> None:
    """A refused cap stop keeps its start: the next tick tries again."""
    cap = MonitorOptions(idle_minutes=15, check_seconds=60, boot_grace_minutes=20, max_runtime_minutes=360)
    projected = project(ready(0, cap_started_at=LAST_TICK - minutes(400)), PodSignal.BUSY, cap)
    assert projected == ProjectedStop(at=LAST_TICK + minutes(1), trigger=StopTrigger.RUNTIME_CAP)


def test_a_disabled_cap_projects_nothing_even_when_armed() -> None:
    assert project(ready(0, cap_started_at=LAST_TICK - minutes(400)), PodSignal.BUSY) is None


def test_the_earliest_stop_wins() -> None:
    """Idle in 14 ticks, the cap in 5: the cap; with the cap 30 ticks away: idle."""
    cap = MonitorOptions(idle_minutes=15, check_seconds=60, boot_grace_minutes=20, max_runtime_minutes=360)
    soon = project(ready(1, cap_started_at=LAST_TICK - minutes(355)), PodSignal.IDLE, cap)
    later = project(ready(1, cap_started_at=LAST_TICK - minutes(330)), PodSignal.IDLE, cap)
    assert soon == ProjectedStop(at=LAST_TICK + minutes(5), trigger=StopTrigger.RUNTIME_CAP)
    assert later == ProjectedStop(at=LAST_TICK + minutes(14), trigger=StopTrigger.IDLE)


def test_a_boot_grace_behind_the_cap_yields_to_it() -> None:
    cap = MonitorOptions(idle_minutes=15, check_seconds=60, boot_grace_minutes=20, max_runtime_minutes=360)
    projected = project(booting(4, cap_started_at=LAST_TICK - minutes(358)), PodSignal.BOOTING, cap)
    assert projected == ProjectedStop(at=LAST_TICK + minutes(2), trigger=StopTrigger.RUNTIME_CAP)


def test_a_cap_between_two_ticks_projects_the_tick_after_it() -> None:
    """CHECK_SECONDS=45 with a 1-minute cap armed at the last tick: 60 s falls between ticks, so 90 s on."""
    fast = MonitorOptions(idle_minutes=15, check_seconds=45, boot_grace_minutes=20, max_runtime_minutes=1)
    projected = project(ready(0, cap_started_at=LAST_TICK), PodSignal.BUSY, fast)
    assert projected == ProjectedStop(at=LAST_TICK + timedelta(seconds=90), trigger=StopTrigger.RUNTIME_CAP)


def test_a_pod_stalling_projects_a_stall_stop_when_its_count_reaches_the_threshold() -> None:
    """Busy by its gauges, no work: 10 of 30 scrapes counted, so the stall stop is 20 ticks out."""
    state = MonitorState(
        counters=PhaseCounters(phase=Phase.READY), pods={"p1": PodMemory(baseline=4.0, stall_ticks=10)}
    )
    assert project(state, PodSignal.BUSY) == ProjectedStop(at=LAST_TICK + minutes(20), trigger=StopTrigger.STALL)


def test_the_stall_guard_off_projects_no_stall_stop() -> None:
    state = MonitorState(
        counters=PhaseCounters(phase=Phase.READY), pods={"p1": PodMemory(baseline=4.0, stall_ticks=10)}
    )
    off = MonitorOptions(idle_minutes=15, check_seconds=60, max_runtime_minutes=0, stall_minutes=0)
    assert project(state, PodSignal.BUSY, off) is None


def test_an_idle_stop_that_falls_in_warm_hours_projects_onto_their_end() -> None:
    """09:00 UTC Wednesday is inside 08:00-18:00 UTC: the idle stop waits for the first tick at 18:00."""
    hours = parse_warm_hours("Mon-Fri 08:00-18:00 UTC", "RUNPOD_WARM_HOURS")
    projected = project_stop(
        ready(5), watch=Watch.WATCHING, last_tick_at=LAST_TICK, last_signal="IDLE", options=NO_CAP, warm_hours=hours
    )
    assert projected == ProjectedStop(at=datetime(2026, 9, 9, 18, 0, tzinfo=UTC), trigger=StopTrigger.IDLE)
