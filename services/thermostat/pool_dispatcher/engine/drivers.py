"""Drivers: which task of this process drives each machine, and the claims whose statement has not answered.

A machine is driven by one task at a time (a run or a boot), known by that task's token: a step resuming a machine
after a lost store answer never takes over one another task drives, and the scaler's recoveries (reconcile,
unbooted machines) leave driven machines alone. Submits whose claim statement is out are tracked too: a machine
they claimed is driven only once they answer, so a read-back waits for them. A submit whose statement raised is
remembered (bounded) as unanswered: a claim of its that landed anyway is on a machine nothing drives and was
never sent, even if running. A boot that began here and ended on an unexpected error is never booted again.
"""

from __future__ import annotations

import asyncio
from collections.abc import KeysView

from .local import Local

UNANSWERED_CLAIMS = 65536
"""Submits whose statement did not answer that the scaler pass still looks for (their claim may land late)."""


class Drivers:
    def __init__(self, local: Local) -> None:
        self._driving = local.driving
        self._submitting: set[asyncio.Event] = set()
        self._unanswered: dict[str, None] = {}  # insertion-ordered, bounded

    # machines and their driving task

    def drive(self, machine_id: str, driver: object | None = None) -> object:
        """Register `driver` (a new token if None) as the machine's; the token."""
        driver = driver if driver is not None else object()
        self._driving[machine_id] = driver
        return driver

    def keep(self, machine_id: str, driver: object) -> None:
        """The machine is `driver`'s unless another task already drives it."""
        self._driving.setdefault(machine_id, driver)

    def release(self, machine_id: str, driver: object) -> None:
        if self._driving.get(machine_id) is driver:
            del self._driving[machine_id]

    def driven(self, machine_id: str) -> bool:
        return machine_id in self._driving

    def driven_by_other(self, machine_id: str, driver: object) -> bool:
        return self._driving.get(machine_id, driver) is not driver

    def machines(self) -> KeysView[str]:
        return self._driving.keys()

    # submits whose claim is out

    def submitting(self) -> asyncio.Event:
        """A submit's claim statement goes out: set the event (and `submitted`) once it answered."""
        answered = asyncio.Event()
        self._submitting.add(answered)
        return answered

    def submitted(self, answered: asyncio.Event) -> None:
        self._submitting.discard(answered)
        answered.set()

    async def claims_answered(self) -> None:
        """Every claim out now has answered (a read just made may have seen one of them)."""
        await asyncio.gather(*(event.wait() for event in list(self._submitting)))

    def unanswered(self, job_id: str) -> None:
        self._unanswered[job_id] = None
        if len(self._unanswered) > UNANSWERED_CLAIMS:
            del self._unanswered[next(iter(self._unanswered))]

    def was_unanswered(self, job_id: str) -> bool:
        return job_id in self._unanswered

    def sent(self, job_id: str) -> None:
        """The job is sent (or settled) from here: no recovery may requeue it as unanswered."""
        self._unanswered.pop(job_id, None)
