"""When the monitor would stop a pod if every tick from now read like the last one that counts.

GetMonitorState reports it (`projectedStopAt`, `projectedStopTrigger`) from the persisted state alone:

    the pod not watched                      nothing projected (no tick moves its state)
    no tick recorded yet                     nothing projected
    Ready, the idle streak accruing          idle: the tick on which the streak reaches its threshold
    Ready, the last counting tick Busy       no idle stop (a busy pod never idles under this reading)
    Booting, boot grace on                   boot-grace: the tick on which the boot ticks reach its threshold
    Booting, boot grace off (0)              no boot-grace stop
    a pod stalling, the stall guard on       stall: the tick on which its stall count reaches its threshold
    an idle stop inside warm hours           idle: the first tick at or after the warm window's end
    the cap armed and enabled                runtime-cap: the first tick at or after cap start + MAX_RUNTIME
    several of these                         the earliest

The streak accrues when it is above 0 (a Busy tick resets it and Unknown holds it, so a streak above 0 says
the last counting tick accrued) or when the last signal was Idle or UnreachableButRunning. Stops happen on
ticks, so every projection lands on a tick, at least one after the last: a wall-clock deadline projects
onto the first tick at or after it (a 12.5-minute cap fires on the 13th minute's tick at CHECK_SECONDS=60),
and a deadline already past onto the next tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from thermostat.policy.common.warm_hours import WarmHours, inside_warm_hours
from thermostat.policy.idle.idle_phase import Phase, StopTrigger
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.idle.monitor_state import MonitorState
from thermostat.policy.idle.monitor_watch import Watch
from thermostat.policy.idle.pod_signal import PodSignal

# signals on which a Ready pod's idle streak grows: read as every tick from now, they end in an idle stop
_IDLE_ACCRUING = frozenset({str(PodSignal.IDLE), str(PodSignal.UNREACHABLE_BUT_RUNNING)})


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectedStop:
    """ProjectedStop is the tick on which the monitor would stop the pod, and why."""

    at: datetime
    trigger: StopTrigger


def project_stop(
    state: MonitorState,
    *,
    watch: Watch,
    last_tick_at: datetime | None,
    last_signal: str,
    options: MonitorOptions,
    warm_hours: WarmHours | None = None,
) -> ProjectedStop | None:
    """The earliest stop the persisted state leads to if nothing changes, or None (see the module table).

    `last_signal` is the aggregate signal of the last tick as stored (a PodSignal value, "" before any).
    """
    if watch is not Watch.WATCHING or last_tick_at is None:
        return None
    last, check, counters = last_tick_at, timedelta(seconds=options.check_seconds), state.counters
    candidates: list[ProjectedStop] = []
    idle_accruing = counters.idle_streak > 0 or last_signal in _IDLE_ACCRUING
    if state.phase is Phase.READY and idle_accruing:
        ticks_to_go = max(1, options.idle_threshold - counters.idle_streak)
        at = last + check * ticks_to_go
        if warm_hours is not None and inside_warm_hours(warm_hours, at, lead=options.idle_window):
            window = warm_hours.upcoming(at)
            if window is not None:
                at = last + check * max(1, -((last - window.end) // check))
        candidates.append(ProjectedStop(at=at, trigger=StopTrigger.IDLE))
    _, stall_ticks = state.stall
    if stall_ticks and options.stall_threshold:
        ticks_to_go = max(1, options.stall_threshold - stall_ticks)
        candidates.append(ProjectedStop(at=last + check * ticks_to_go, trigger=StopTrigger.STALL))
    if state.phase is Phase.BOOTING and options.boot_grace_threshold:
        ticks_to_go = max(1, options.boot_grace_threshold - counters.booting_ticks)
        candidates.append(ProjectedStop(at=last + check * ticks_to_go, trigger=StopTrigger.BOOT_GRACE))
    if state.cap_started_at is not None and options.max_runtime is not None:
        deadline = state.cap_started_at + options.max_runtime
        ticks_to_go = max(1, -((last - deadline) // check))  # ceil, in exact timedelta arithmetic
        candidates.append(ProjectedStop(at=last + check * ticks_to_go, trigger=StopTrigger.RUNTIME_CAP))
    return min(candidates, key=lambda c: c.at) if candidates else None
