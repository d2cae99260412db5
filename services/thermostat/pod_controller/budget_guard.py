"""The wake's budget check (issue 12, "Budgets: a real ceiling"): before a wake touches RunPod with a write,
metering judges the pod's spend plus the wake's projected spend against the pod's budgets.

Rule, documented in docs/metering.md ("Budgets"):
- METERING_ADDR unset: no check (a deployment without metering has no budgets).
- METERING_ADDR set: the wake asks metering's CheckPodBudget beside its volume lookup (a read) and waits for the
  answer before acting on the lookup, so a refused wake writes nothing to RunPod; a budget reached fails
  the wake as Refused, 409, the detail naming the budget and the numbers. With a ceiling not reached, the
  projection is judged before the wake's first start or create (a RunPod write), refused the same way when it
  does not fit in what is left; a wake that finds its pod running or booting writes nothing and projects nothing.
- METERING_ADDR set and metering unreachable or erring: refused the same way (fail closed, as an unreadable
  lookup is): a ceiling that cannot be read is not "no ceiling".

The projection (policy/metering/budget.py) is the cheapest acceptable GPU's rate (the catalogue read the
create walk would make, a read and never a write) times the time until the earliest automatic stop of a pod
nobody uses: its boot (the median of measured boots, else the boot grace) plus the idle window, bounded by
the runtime cap — the monitor's own IDLE_MINUTES, RUNPOD_BOOT_GRACE_MINUTES and MAX_RUNTIME_MINUTES. With no
acceptable GPU in the catalogue (unreadable, or none eligible) the rate is the one the write bills at: for a
start the pod's observed cost, else its newest recorded rate; for a create the candidate's price. With none
known the wake is refused (fail closed), never projected at 0.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import grpc

from thermostat.chassis.request_context import outgoing_metadata
from thermostat.metering.v1 import metering_pb2, metering_pb2_grpc
from thermostat.policy.common.pod_options import PodOptions
from thermostat.policy.idle.monitor_options import MonitorOptions
from thermostat.policy.metering.budget import (
    BudgetVerdict,
    PodBudget,
    Projection,
    judge_budget,
    project_wake_spend,
)
from thermostat.policy.wake.gpu_selection import select_gpus
from thermostat.policy.wake.wake_eta import estimate_eta, select_boot_durations
from thermostat.providers.runpod.client import RunPodV2Client
from thermostat.store.connections import STORE_ERRORS

from .repository import PodRepository

log = logging.getLogger("thermostat.pod_controller.budget")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetRefusal:
    """Why a wake may not run: the detail names the budget and the numbers that decided it."""

    reason: str


class BudgetGuard:
    def __init__(
        self, stub: metering_pb2_grpc.MeteringInternalStub | None, monitor: MonitorOptions, *, timeout: float = 2.0
    ) -> None:
        self.stub = stub
        self.monitor = monitor
        self.timeout = timeout

    @property
    def enabled(self) -> bool:
        return self.stub is not None

    async def projection(
        self, pod: PodOptions, client: RunPodV2Client, records: PodRepository, *, fallback_rate: float | None = None
    ) -> Projection | None:
        """The wake's projected spend; None when no rate is known (fits() then refuses: fail closed)."""
        selection = select_gpus(await client.get_catalog(), pod.gpu_criteria())
        # No acceptable GPU in the catalogue (unreadable, or none eligible) is no rate, not a free one: the rate
        # the write will bill at (the pod's own for a start, the candidate's for a create) stands in for it.
        cheapest = selection.candidates[0].price_per_hour if selection.candidates else fallback_rate
        if cheapest is None:
            return None
        try:
            boots = await records.recent_boots(pod.name)
        except STORE_ERRORS:
            boots = []
        measured = estimate_eta(select_boot_durations(boots, None), 0.0)
        boot_minutes = measured / 60 if measured is not None else self.monitor.boot_grace_minutes
        return project_wake_spend(
            cheapest_rate_per_hour=cheapest,
            boot_minutes=boot_minutes,
            idle_minutes=self.monitor.idle_minutes,
            runtime_cap_minutes=self.monitor.max_runtime_minutes,
        )

    async def headroom(self, pod: PodOptions) -> BudgetRefusal | Headroom | None:
        """Metering's answer for the pod, one round trip: None (no check, or no ceiling), a refusal (a budget
        reached, or metering unreachable), or the headroom a start or create must then fit its projection in.

        The projection (a catalogue read) is left to `fits`, asked only before a billable write: a wake that
        finds its pod running or booting spends nothing new, so it pays for no catalogue read.
        """
        if self.stub is None:
            return None
        try:
            state = await self.stub.CheckPodBudget(
                metering_pb2.CheckPodBudgetRequest(name=pod.name, projected_usd=0.0),
                timeout=self.timeout,
                metadata=outgoing_metadata(),
            )
        except grpc.aio.AioRpcError as error:
            log.warning("pod %s: metering unreachable (%s): wake refused", pod.name, error.code().name)
            return BudgetRefusal(
                reason=f"budget unknown: metering unreachable ({error.code().name}); the wake is "
                "refused while METERING_ADDR is set (fail closed)"
            )
        headroom = Headroom(
            budget=PodBudget(
                daily_usd=state.daily_limit_usd if state.HasField("daily_limit_usd") else None,
                monthly_usd=state.monthly_limit_usd if state.HasField("monthly_limit_usd") else None,
            ),
            today_usd=state.today_usd,
            month_usd=state.month_usd,
        )
        if headroom.budget.daily_usd is None and headroom.budget.monthly_usd is None:
            return None
        return _refusal(headroom.judge(pod, 0.0), None) or headroom

    async def fits(
        self,
        pod: PodOptions,
        headroom: Headroom,
        client: RunPodV2Client,
        records: PodRepository,
        *,
        fallback_rate: float | None = None,
    ) -> BudgetRefusal | None:
        """None when the wake's projected spend fits in the headroom; else why not. `fallback_rate` is the rate
        the write bills at when the catalogue offers no acceptable GPU; with neither, the spend cannot be
        projected and the wake is refused (fail closed: an unknown projection is not a free one)."""
        projected = await self.projection(pod, client, records, fallback_rate=fallback_rate)
        if projected is None:
            return BudgetRefusal(
                reason=f"pod {pod.name}: projected spend unknown: no acceptable GPU in the catalogue (unreadable, or "
                "none eligible) and no rate known for the pod; the wake is refused while a budget is set (fail closed)"
            )
        return _refusal(headroom.judge(pod, projected.usd), projected)


@dataclass(frozen=True, slots=True, kw_only=True)
class Headroom:
    """A pod's ceilings and its spend, as metering answered them."""

    budget: PodBudget
    today_usd: float
    month_usd: float

    def judge(self, pod: PodOptions, projected_usd: float) -> BudgetVerdict:
        return judge_budget(
            self.budget,
            today_usd=self.today_usd,
            month_usd=self.month_usd,
            projected_usd=projected_usd,
            pod_name=pod.name,
        )


def _refusal(verdict: BudgetVerdict, projected: Projection | None) -> BudgetRefusal | None:
    if verdict.allowed:
        return None
    numbers = (
        f"budget={verdict.period} limit_usd={verdict.limit_usd:.4f} spent_usd={verdict.spent_usd:.4f} "
        f"projected_usd={verdict.projected_usd:.4f}"
    )
    if projected is not None:
        numbers += f" rate_per_hour={projected.rate_per_hour:.4f} projected_hours={projected.hours:.4f}"
    return BudgetRefusal(reason=f"{verdict.reason} [{numbers}]")
