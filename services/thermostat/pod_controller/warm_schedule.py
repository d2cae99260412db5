"""The warm-hours schedule (issue 26): wake each pod before its warm hours open, so the day's first chat finds it
ready. Every `every_seconds` one replica (the `pod-controller:warm-schedule` lease) asks
thermostat.policy.wake.scheduled_wake, per pod with warm hours, whether a wake is due now — the lead from the pod's
measured boots — and runs the ordinary wake with trigger `schedule`: the same gate (a wake in flight is joined,
never a second pod), the same budget check (refused like any wake). Each window is woken for once by a replica.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.periodic import Periodic
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.common.warm_hours import WarmHours
from thermostat.policy.wake.scheduled_wake import ScheduledWake, scheduled_wake_due, wake_lead
from thermostat.policy.wake.wake_eta import select_boot_durations
from thermostat.policy.wake.wake_result import WakeResult
from thermostat.store.connections import STORE_ERRORS
from thermostat.store.lease import LeaseStore

from .repository import PodRepository

log = logging.getLogger("thermostat.pod_controller.schedule")

SCHEDULE_LEASE = "pod-controller:warm-schedule"
RunWake = Callable[[PodOptions], Awaitable[WakeResult]]
"""The controller's wake with trigger `schedule` (PodControl.run_wake)."""


class WarmSchedule:
    def __init__(
        self,
        pods: Sequence[PodOptions],
        hours: Mapping[str, WarmHours | None],
        records: PodRepository,
        leases: LeaseStore,
        run_wake: RunWake,
        *,
        replica: str,
        every_seconds: float = 30.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._pods = [(pod, hours[pod.name]) for pod in pods if hours.get(pod.name) is not None]
        self._records = records
        self._leases = leases
        self._run_wake = run_wake
        self._replica = replica
        self.every_seconds = every_seconds
        self._clock = clock
        self._woken_for: dict[str, datetime] = {}
        self._wakes: set[asyncio.Task[WakeResult]] = set()
        self._loop = Periodic(
            "pod-warm-schedule", every_seconds, self.run_pass, log=log, what="warm-hours schedule", clock=clock
        )

    @property
    def scheduled(self) -> bool:
        return bool(self._pods)

    async def run_pass(self) -> list[tuple[str, ScheduledWake]]:
        """One pass under the schedule lease: the wakes started (each runs detached); [] when another replica
        holds the lease or no wake is due."""
        if not self._pods:
            return []
        # held past the pass: the other replica skips its passes while this one schedules
        if await self._leases.acquire(SCHEDULE_LEASE, self._replica, self.every_seconds * 1.5 + 60) is None:
            return []
        started: list[tuple[str, ScheduledWake]] = []
        for pod, hours in self._pods:
            assert hours is not None
            due = await self._due(pod, hours, self._clock.now())
            if due is None:
                continue
            self._woken_for[pod.name] = due.window.start
            log.info(
                "pod %s: warm hours %s open at %s; waking it %s ahead (trigger schedule)",
                pod.name,
                hours.text,
                due.window.start.isoformat(),
                _duration(due.lead),
            )
            task = asyncio.create_task(self._wake(pod), name=f"schedule:{pod.name}")
            self._wakes.add(task)
            task.add_done_callback(self._wakes.discard)
            started.append((pod.name, due))
        return started

    async def settle(self) -> None:
        """Wait for the wakes this schedule started (tests; shutdown drains them through the gate)."""
        if self._wakes:
            await asyncio.wait(set(self._wakes))

    async def _due(self, pod: PodOptions, hours: WarmHours, now: datetime) -> ScheduledWake | None:
        try:
            boots = select_boot_durations(await self._records.recent_boots(pod.name), None)
        except STORE_ERRORS as error:
            log.warning(
                "pod %s: measured boots unreadable (%s); the default lead applies", pod.name, type(error).__name__
            )
            boots = ()
        lead = wake_lead(boots, margin=timedelta(seconds=self.every_seconds))
        return scheduled_wake_due(hours, now, lead=lead, woken_for=self._woken_for.get(pod.name))

    async def _wake(self, pod: PodOptions) -> WakeResult:
        result = await self._run_wake(pod)
        log.info("pod %s: scheduled wake %s: %s", pod.name, result.outcome, result.message)
        return result

    async def start(self) -> None:
        if self._pods:
            await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()


def _duration(value: timedelta) -> str:
    return str(timedelta(seconds=round(value.total_seconds())))
