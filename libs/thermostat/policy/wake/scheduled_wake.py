"""When the pod controller wakes a pod for its warm hours (issue 26), so that it is ready as they open.

A window of the pod's warm hours (policy/common/warm_hours.py) opens at `start`; a wake takes as long as the pod's
recent measured boots say (the median wake → ready time, `wake_eta`), so the schedule wakes it that long before
`start`, plus a margin of one schedule pass (the pass that sees the moment may come that much later). Without
a measured boot the lead is DEFAULT_LEAD, the slow end of the three to nine minutes a boot was seen to take.

    now (against the window this pass sees: the current one, else the next to open)      decision
    ------------------------------------------------------------------------------------  ---------
    before start − lead                                                                     wait
    in [start − lead, start + CATCH_UP), this window not woken for yet                      wake
    in [start − lead, start + CATCH_UP), this window already woken for (by this replica)    wait
    at or after start + CATCH_UP (or the window's end, if sooner)                           wait

Once per window: a pod the operator stops at 10:00 stays stopped, and a pass that finds the pod already running
wakes nothing (the wake answers AlreadyRunning and bills nothing). CATCH_UP bounds how late a controller that
was down across the start (a deploy at 08:00) still wakes it; later, the day is left to the first user.

The wake is the ordinary one — the same gate, so a user's wake in flight is joined and never doubled (one pod,
never a second), the same budget check that refuses it, and its billable start or create is recorded with
trigger `schedule`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from thermostat.policy.common.warm_hours import Occurrence, WarmHours
from thermostat.policy.wake.wake_eta import estimate_eta

DEFAULT_LEAD = timedelta(minutes=10)
CATCH_UP = timedelta(minutes=15)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledWake:
    """ScheduledWake is a wake the schedule issues now, for the window opening (or open) at `window.start`."""

    window: Occurrence
    lead: timedelta


def wake_lead(boot_durations: Sequence[float], *, margin: timedelta) -> timedelta:
    """How long before a window opens the wake is issued: the measured wake → ready median (else DEFAULT_LEAD),
    plus `margin` (one schedule pass)."""
    eta = estimate_eta(boot_durations, 0.0)
    return (DEFAULT_LEAD if eta is None else timedelta(seconds=eta)) + margin


def scheduled_wake_due(
    hours: WarmHours, now: datetime, *, lead: timedelta, woken_for: datetime | None
) -> ScheduledWake | None:
    """The wake to issue now, or None (see the module table). `woken_for` is the start of the last window this
    replica woke the pod for."""
    window = hours.upcoming(now)
    if window is None or window.start == woken_for:
        return None
    if window.start - lead <= now < min(window.start + CATCH_UP, window.end):
        return ScheduledWake(window=window, lead=lead)
    return None
