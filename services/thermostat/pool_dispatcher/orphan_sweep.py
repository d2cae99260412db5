"""The orphan sweep (issue 12): provider machines named as the pool's that no machine row knows.

Every `every_seconds` (and on demand, `sweep()`), each configured backend that can list its machines
(`ListsMachines`: RunPod, Fly, Docker) is listed, then the store is read (in that order: a row is inserted before its
boot, so a machine the listing holds already has its row in the later read), and
thermostat.policy.pool.orphans decides which are orphans. Each is logged; the count of the last pass and the
total found are kept for the service's state (GET /v1/orphans). With ORPHAN_SWEEP=terminate an orphan found by
two consecutive passes (policy: a stop in flight can look like an orphan once) is also stopped at its provider
and recorded in pool_orphan_stops with trigger `orphan`, and on the machine-events feed metering reads as
event `orphan-stopped` (only while this process's instance lease is trusted:
a process that may have lost its lease makes no provider calls). The default only reports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.periodic import Periodic
from thermostat.policy.pool.orphans import ListedMachine, Orphan, OrphanSweep, find_orphans, to_terminate
from thermostat.providers.pool.backend import BackendError

from .dispatcher import Dispatcher

log = logging.getLogger("thermostat.pool_dispatcher.orphans")


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundOrphan:
    backend: str
    orphan: Orphan
    terminated: bool


class OrphanSweeper:
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        mode: OrphanSweep,
        prefix: str,
        every_seconds: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.dispatcher = dispatcher
        self.mode = mode
        self.prefix = prefix
        self.every_seconds = every_seconds
        self.last: tuple[FoundOrphan, ...] = ()
        self.found_total = 0
        self._loop = Periodic("pool-orphan-sweep", every_seconds, self.sweep, log=log, what="orphan sweep", clock=clock)

    async def sweep(self) -> tuple[FoundOrphan, ...]:
        """One pass over every listing backend: the orphans found (and, in terminate mode, which were ended)."""
        d = self.dispatcher
        listings: dict[str, tuple[ListedMachine, ...]] = {}
        for kind, backend in d.backends.items():
            list_machines = getattr(backend, "list_machines", None)
            if list_machines is None:
                continue
            listed = await list_machines()
            if listed is None:
                log.warning("orphan sweep: the %s backend could not be listed; nothing judged there", kind)
                continue
            listings[kind] = listed
        machine_ids, provider_ids = await d.repo.machines.known_machines()  # after the listings, never before
        found: list[FoundOrphan] = []
        for kind, listed in listings.items():
            orphans = find_orphans(
                listed=listed, known_machine_ids=machine_ids, known_provider_ids=provider_ids, prefix=self.prefix
            )
            previous = [f.orphan for f in self.last if f.backend == kind and not f.terminated]
            confirmed = set(to_terminate(current=orphans, previous=previous))
            for orphan in orphans:
                terminated = (
                    self.mode is OrphanSweep.TERMINATE and orphan in confirmed and await self._terminate(kind, orphan)
                )
                log.warning(
                    "orphan machine: %s %s named %s (machine %s) is unknown to the store; %s",
                    kind,
                    orphan.provider_id,
                    orphan.name,
                    orphan.machine_id,
                    "terminated"
                    if terminated
                    else "reported (ORPHAN_SWEEP=report)"
                    if self.mode is OrphanSweep.REPORT
                    else "terminated if the next pass finds it again",
                )
                found.append(FoundOrphan(backend=kind, orphan=orphan, terminated=terminated))
        self.last = tuple(found)
        self.found_total += len(found)
        return self.last

    async def _terminate(self, kind: str, orphan: Orphan) -> bool:
        d = self.dispatcher
        if not d.ownership.trusted_for_call():
            return False
        try:
            await d.backends[kind].stop(orphan.provider_id)
        except (BackendError, OSError) as error:
            log.warning("orphan %s %s: stop failed (%s); the next sweep retries it", kind, orphan.provider_id, error)
            return False
        await d.repo.machines.record_orphan_stop(
            backend=kind,
            provider_id=orphan.provider_id,
            name=orphan.name,
            machine_id=orphan.machine_id,
            machine_type=orphan.machine_type,
            stopped_by=d.instance_id,
        )
        return True

    async def start(self) -> None:
        await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
