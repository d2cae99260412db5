"""The pod controller's orphan sweep (issue 12): live pods it made that no configured pod manages.

Every `every_seconds` one replica (the `pod-controller:orphan-sweep` lease) lists the account's pods, reads
the pod names the store's actions hold, and thermostat.policy.wake.pod_orphans decides which pods are
orphans. Each is logged; with ORPHAN_SWEEP=terminate one found by two consecutive passes of the same replica
is terminated and the call recorded as a billable action with trigger `orphan` (accepted or refused, like
every other call). `scan()` is the same judgement without acting, for GET /api/orphans. An unreadable listing
judges nothing: it is never "no orphans".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.periodic import Periodic
from thermostat.policy.common.orphan_sweep import OrphanSweep
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.wake.pod_orphans import PodOrphan, find_pod_orphans, to_terminate
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.lease import LeaseStore

from .metrics import PodMetrics
from .repository import ActionEntry, PodRepository

log = logging.getLogger("thermostat.pod_controller.orphans")

SWEEP_LEASE = "pod-controller:orphan-sweep"


class ListingUnreadable(Exception):
    """RunPod's pod list could not be read: nothing can be judged."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SweptOrphan:
    orphan: PodOrphan
    terminated: bool


class PodOrphanSweeper:
    def __init__(
        self,
        client: RunPodV2Client,
        records: PodRepository,
        leases: LeaseStore,
        pods: Sequence[PodOptions],
        *,
        mode: OrphanSweep,
        every_seconds: float,
        replica: str,
        metrics: PodMetrics | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._metrics = metrics or PodMetrics()
        self._client = client
        self._records = records
        self._leases = leases
        self._volumes = {pod.name: pod.volume_id.strip() for pod in pods}
        self.mode = mode
        self.every_seconds = every_seconds
        self._replica = replica
        self._previous: tuple[PodOrphan, ...] = ()
        # the system clock unless a test injects one (assemble does not pass the controller's: its tests step that
        # clock through wakes, and a sweep minutes apart must not run at each step)
        self._loop = Periodic("pod-orphan-sweep", every_seconds, self.sweep, log=log, what="orphan sweep", clock=clock)

    async def scan(self) -> tuple[PodOrphan, ...]:
        """The orphans as of now, judged without acting; ListingUnreadable when RunPod cannot be listed."""
        listed = await self._client.pods_listed()
        if listed is None:
            raise ListingUnreadable("RunPod's pod list could not be read; no pod was judged")
        known = await self._records.known_pod_names()
        return find_pod_orphans(listed=listed, volumes=self._volumes, known_names=known)

    async def sweep(self) -> tuple[SweptOrphan, ...] | None:
        """One pass under the sweep lease: the orphans found and which were terminated; None when another
        replica holds the lease (it sweeps) or the listing was unreadable."""
        # held past the pass on purpose: the other replica skips its passes until this one stops sweeping
        lease = await self._leases.acquire(SWEEP_LEASE, self._replica, self.every_seconds * 1.5 + 60)
        if lease is None:
            return None
        try:
            orphans = await self.scan()
        except ListingUnreadable as unreadable:
            log.warning("orphan sweep: %s", unreadable)
            return None
        confirmed = set(to_terminate(current=orphans, previous=self._previous))
        swept: list[SweptOrphan] = []
        for orphan in orphans:
            terminated = self.mode is OrphanSweep.TERMINATE and orphan in confirmed and await self._terminate(orphan)
            log.warning(
                "orphan pod: %s named %s (%s, %s): %s; %s",
                orphan.pod_id,
                orphan.name,
                orphan.status or "status unknown",
                orphan.reason,
                "no configured pod manages it",
                "terminated"
                if terminated
                else "reported (ORPHAN_SWEEP=report)"
                if self.mode is OrphanSweep.REPORT
                else "terminated if the next pass finds it again",
            )
            swept.append(SweptOrphan(orphan=orphan, terminated=terminated))
        self._previous = tuple(s.orphan for s in swept if not s.terminated)
        return tuple(swept)

    async def _terminate(self, orphan: PodOrphan) -> bool:
        answer = await self._client.terminate(orphan.pod_id)
        entry = ActionEntry(
            pod_name=orphan.owner,
            action="Terminate",
            pod_id=orphan.pod_id,
            ok=answer.ok,
            trigger="orphan",
            http_status=answer.http_status,
            detail=answer.detail or orphan.reason,
        )
        self._metrics.action(entry)
        await self._records.record_action(entry)
        if not answer.ok:
            log.warning(
                "orphan pod %s: terminate refused (HTTP %d); the next pass retries", orphan.pod_id, answer.http_status
            )
        return answer.ok

    async def start(self) -> None:
        await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
