"""Hints: "jobs are near", so a machine's boot overlaps the user's typing instead of their first run.

The worker-pool seed: a hint starts one machine of the type for the caller's tenant unless one is already warm or
starting (then `started` is false and `reason` is `no_demand`, so repeating a hint is free). It is held to
the type's max_workers and the fleet's max_workers_total like a job's machine (`tenant_cap`, `fleet_cap`),
and a machine no job reaches is stopped after the type's cool-down like any idle one (the reaper's work).

A hint is placement with a demand of one, so both follow one rule set (stale machines included: an old-image
machine is not "warm" for a hint, and an idle one may be retired to make room).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from thermostat.policy.pool.machine_type import Catalogue
from thermostat.policy.pool.machines import Machine, of_tenant
from thermostat.policy.pool.placement import Demand, PlacementPlan, plan_placement, ready_count
from thermostat.policy.pool.queue_order import QueuedJob
from thermostat.policy.pool.submit_options import SubmitError, SubmitErrorKind, unknown_machine_type


class HintReason(StrEnum):
    NO_DEMAND = "no_demand"
    TENANT_CAP = "tenant_cap"
    FLEET_CAP = "fleet_cap"


@dataclass(frozen=True, slots=True, kw_only=True)
class HintDecision:
    """HintDecision is the 202 body (`started`, `reason`) and the plan the service carries out."""

    started: bool
    reason: HintReason | None
    plan: PlacementPlan


def decide_hint(
    *,
    tenant_id: str,
    machine_type: str,
    machines: Sequence[Machine],
    catalogue: Catalogue,
    max_workers_total: int | None,
) -> HintDecision | SubmitError:
    """Start one machine unless one is warm or starting for the tenant and type, within both caps.

    The body's `machine_type` is checked as a submit's is: required, and in the catalogue.
    """
    if not machine_type:
        return SubmitError(kind=SubmitErrorKind.MISSING, parameter="machine_type", message="is required")
    if catalogue.get(machine_type) is None:
        return unknown_machine_type(machine_type, catalogue)
    if ready_count(of_tenant(machines, tenant_id, machine_type), catalogue) > 0:
        return HintDecision(started=False, reason=HintReason.NO_DEMAND, plan=PlacementPlan())
    demand = Demand(
        tenant_id=tenant_id,
        machine_type=machine_type,
        queued=1,
        head=QueuedJob(id="hint", priority=0, sequence=0),
    )
    plan = plan_placement(demand=[demand], machines=machines, catalogue=catalogue, max_workers_total=max_workers_total)
    if plan.starts:
        return HintDecision(started=True, reason=None, plan=plan)
    reason = HintReason.FLEET_CAP if plan.fleet_cap_hit else HintReason.TENANT_CAP
    return HintDecision(started=False, reason=reason, plan=plan)
