"""Fair share carried out: the retirements thermostat.policy.pool.fair_share decides at the fleet cap.

Placement calls `carry_out` inside its transaction, under the placement lock, after its plan: the policy reads the
fleet as that transaction saw it and the tenants the fleet cap held back, and this writes its answer. A warm
machine is retired at once (`yield_machine`: it becomes this process's to stop, whichever process owned it; the
caller stops it after the commit and places again). A busy one is marked: its owner's completion retires it instead
of handing it the next job (runner.py), never mid-job. A mark the pass no longer needs is cleared (`unyield`). A
rotation (thermostat.policy.pool.rotation: nobody over its share, the holder's tenure is over) also records the
holder's turn (`record_turn`), so its wait for the next slot begins now, behind the tenants already waiting.

Each retirement is logged with the tenants and the share, and counted (`thermostat_pool_fair_share_retirements_total`,
docs/operations.md), so an operator can tell a machine retired for fairness from one reaped at cool-down.
"""

from __future__ import annotations

import logging

from thermostat.policy.pool.fair_share import FairShareDecision, plan_fair_share
from thermostat.policy.pool.machines import Machine, MachineState
from thermostat.policy.pool.placement import DeferReason, Demand, PlacementPlan, queued_by_tenant, wait_places

from ..metrics import PoolMetrics
from ..repository import PoolRepository
from ..repository.machines import Conn
from .catalogue import CatalogueCache
from .ownership import Ownership

log = logging.getLogger("thermostat.pool_dispatcher")


def fair_share_reason(to_tenant: str) -> str:
    """A fair-share retirement's last error on the machine row."""
    return f"retired for fair share: tenant {to_tenant} waits at the fleet cap"


class FairShare:
    def __init__(
        self,
        *,
        repo: PoolRepository,
        ownership: Ownership,
        metrics: PoolMetrics,
        max_workers_total: int | None,
        catalogue: CatalogueCache,
    ) -> None:
        self.repo = repo
        self.ownership = ownership
        self.metrics = metrics
        self.max_workers_total = max_workers_total
        self.catalogue = catalogue

    async def carry_out(
        self,
        c: Conn,
        demand: list[Demand],
        plan: PlacementPlan,
        seen: list[Machine],
        stops: list[tuple[str, str | None]],
    ) -> FairShareDecision:
        """Decide and write this pass's fair share on the placement transaction `c`; the machines retired now are
        appended to `stops` (machine id, provider id) for the caller to stop after the commit."""
        held_back: dict[str, int] = {}
        for deferred in plan.deferred:
            if deferred.reason is DeferReason.FLEET_CAP:
                held_back[deferred.tenant_id] = held_back.get(deferred.tenant_id, 0) + deferred.count
        cap = self.max_workers_total
        decision = plan_fair_share(
            queued=queued_by_tenant(demand),
            held_back=held_back,
            machines=seen,
            max_workers_total=cap,
            waits=wait_places(demand),
            catalogue=self.catalogue.catalogue,
        )
        if decision.clear:
            for machine_id in await self.repo.machines.unyield(c, decision.clear):
                log.info("machine %s keeps its slot: no tenant waits for it at the fleet cap any more", machine_id)
        for given in (*decision.retire_now, *decision.mark):
            state, provider_id = await self.repo.machines.yield_machine(
                c,
                given.machine_id,
                self.ownership.owner,
                to_tenant=given.to_tenant,
                mark_busy=True,
                reason=fair_share_reason(given.to_tenant),
            )
            if state in (MachineState.STOPPING, MachineState.BUSY) and given.rotation:
                await self.repo.machines.record_turn(c, given.tenant_id)  # its wait begins now, behind those waiting
            why = (
                f"its turn at the fleet cap of {cap} is over (past its minimum tenure, nobody over the share of"
                if given.rotation
                else f"at the fleet cap of {cap} (over the share of"
            )
            if state == MachineState.STOPPING:
                stops.append((given.machine_id, provider_id))
                self.metrics.fair_share_retired("idle")
                log.warning(
                    "machine %s of tenant %s retired for fair share: tenant %s waits, %s %s machine(s) per tenant "
                    "with demand)",
                    given.machine_id, given.tenant_id, given.to_tenant, why, decision.share,
                )  # fmt: skip
            elif state == MachineState.BUSY:
                log.warning(
                    "machine %s of tenant %s retires after its current job for fair share: tenant %s waits, %s %s "
                    "machine(s) per tenant with demand)",
                    given.machine_id, given.tenant_id, given.to_tenant, why, decision.share,
                )  # fmt: skip
        return decision
