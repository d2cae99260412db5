"""Writes that must land: a runner's or a boot's store write is written until the store takes it, and a write
whose answer was lost is read back from the machine (a task ending on a store error would leave its rows under a
live owner that no reclaim touches). Writes are fenced by owner and term, so writing again is safe: a lost lease
answers as "no longer ours". Only transient store errors are retried (thermostat.policy.pool.store_retry).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TypeVar

from thermostat.chassis.clock import Clock
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.store_retry import HeldAction, resume_held, retry_delay
from thermostat.store.connections import TRANSIENT_STORE_ERRORS

from ..repository import Assignment, PoolRepository
from .drivers import Drivers
from .ownership import Ownership

log = logging.getLogger("thermostat.pool_dispatcher")

T = TypeVar("T")


class Writes:
    def __init__(self, repo: PoolRepository, ownership: Ownership, drivers: Drivers, clock: Clock) -> None:
        self.repo = repo
        self.ownership = ownership
        self.drivers = drivers
        self.clock = clock

    async def durably(self, what: str, write: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The write's answer once the store takes it, and whether an attempt failed first (its answer may have
        been lost after it landed)."""
        attempt = 0
        while True:
            try:
                return await write(), attempt > 0
            except TRANSIENT_STORE_ERRORS as error:
                attempt += 1
                delay = retry_delay(attempt)
                if attempt == 1 or delay >= retry_delay(attempt + 1):  # the first, then one line per capped wait
                    log.warning("%s: the store did not answer (%s); writing again in %.2f s", what, error, delay)
                await self.clock.sleep(delay)

    async def read_back(self, machine_id: str, driver: object) -> tuple[str | None, Assignment | None, str | None]:
        """After a write whose answer was lost: the machine's state, the job to resume on it and its provider id,
        read back. (None, None, None): the machine is no longer this process's. A job another task of this
        process drives (a submit claiming the machine meanwhile, awaited here) is not resumed."""
        hold, _ = await self.durably(
            f"machine {machine_id}: read back",
            lambda: self.repo.machines.machine_hold(machine_id, self.ownership.owner),
        )
        await self.drivers.claims_answered()  # a claim the read saw is one of these, or already registered
        if hold is None:
            return None, None, None
        if self.drivers.driven_by_other(machine_id, driver):
            return hold.machine_state, None, hold.provider_id
        action = resume_held(JobState(hold.job_state) if hold.job_state else None)
        if action is HeldAction.NOTHING or hold.job is None:
            return hold.machine_state, None, hold.provider_id
        log.warning("machine %s: resuming job %s after a lost store answer (%s)", machine_id, hold.job.job_id, action)
        return hold.machine_state, replace(hold.job, sent=action is HeldAction.SEND), hold.provider_id
