"""Warm machines of a tenant whose budget is reached are stopped at once, not at their cool-down (issue 12).

Every `every_seconds` (and on demand, `reap_over_budget()`), this process's warm machines are grouped by tenant
and metering asked about each tenant once; a tenant whose spend has reached a ceiling has its warm machines
retired with reason `budget`. The retire is guarded by the machine's state in the same statement
(`retire` in repository/machines.sql), so a machine a job claimed meanwhile keeps running its job: a busy machine is
never stopped here, and it is reaped on a later pass once it is warm again.
"""

from __future__ import annotations

import logging

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.chassis.periodic import Periodic
from thermostat.policy.pool.machines import MachineState

from .budget_gate import BudgetGate
from .dispatcher import Dispatcher
from .engine.fleet import RetirePlan

log = logging.getLogger("thermostat.pool_dispatcher.budget")


class BudgetReaper:
    def __init__(
        self, dispatcher: Dispatcher, gate: BudgetGate, *, every_seconds: float, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.dispatcher = dispatcher
        self.gate = gate
        self.every_seconds = every_seconds
        self._loop = Periodic(
            "pool-budget-reaper", every_seconds, self.reap_over_budget, log=log, what="budget reaping", clock=clock
        )

    async def reap_over_budget(self) -> list[str]:
        """Retire this process's warm machines of tenants over budget; the ids retired."""
        d = self.dispatcher
        warm = [
            r for r in await d.repo.machines.own_machines(d.ownership.owner) if r.machine.state is MachineState.WARM
        ]
        retired: list[str] = []
        for tenant in sorted({r.machine.tenant_id for r in warm}):
            reason = await self.gate.exhausted(tenant)
            if reason is None:
                continue
            for row in (r for r in warm if r.machine.tenant_id == tenant):
                if await d.fleet.retire(
                    RetirePlan(machine_id=row.machine.id, provider_id=row.provider_id, reason=f"budget: {reason}")
                ):
                    log.warning("machine %s retired at once: %s", row.machine.id, reason)
                    retired.append(row.machine.id)
        return retired

    async def start(self) -> None:
        if self.gate.stub is not None:  # no METERING_ADDR: every tenant may, nothing to reap
            await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
