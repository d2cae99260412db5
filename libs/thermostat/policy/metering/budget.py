"""Pod budgets: may a pod spend more, and how much a wake is projected to spend (issue 12, "Budgets").

A budget is a ceiling per UTC day and per UTC month in USD; unset is no ceiling. The verdict, per period
with a ceiling, in this order:

    spent ≥ limit                        exhausted: refuse a wake, stop a running pod (names the budget)
    spent + projected > limit            refuse the wake: it cannot fit in what is left (names the budget)
    otherwise                            allowed

The daily budget is judged before the monthly one, so a refusal names the tighter period first. The
projection of a wake is the rate of the cheapest acceptable GPU times the time until the earliest automatic
stop of a pod nobody uses: its boot plus the idle window, bounded by the runtime cap (0 disables the cap).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BudgetPeriod(StrEnum):
    DAILY = "daily"
    MONTHLY = "monthly"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodBudget:
    daily_usd: float | None = None
    monthly_usd: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetVerdict:
    allowed: bool
    exhausted: bool = False
    period: BudgetPeriod | None = None
    limit_usd: float = 0.0
    spent_usd: float = 0.0
    projected_usd: float = 0.0
    reason: str = ""


def judge_budget(
    budget: PodBudget,
    *,
    today_usd: float,
    month_usd: float,
    projected_usd: float,
    pod_name: str = "",
    subject: str | None = None,
) -> BudgetVerdict:
    """The verdict of the table above; `subject` names what is judged in the reason (default: the pod)."""
    who = subject if subject is not None else f"pod {pod_name}"
    periods = ((BudgetPeriod.DAILY, budget.daily_usd, today_usd), (BudgetPeriod.MONTHLY, budget.monthly_usd, month_usd))
    for period, limit, spent in periods:
        if limit is None:
            continue
        if spent >= limit:
            return BudgetVerdict(
                allowed=False,
                exhausted=True,
                period=period,
                limit_usd=limit,
                spent_usd=spent,
                projected_usd=projected_usd,
                reason=f"{who}: {period} budget of {limit:.2f} USD reached (spent {spent:.4f} USD)",
            )
        if spent + projected_usd > limit:
            return BudgetVerdict(
                allowed=False,
                period=period,
                limit_usd=limit,
                spent_usd=spent,
                projected_usd=projected_usd,
                reason=(
                    f"{who}: projected spend {projected_usd:.4f} USD does not fit in the {period} "
                    f"budget of {limit:.2f} USD (spent {spent:.4f} USD, {limit - spent:.4f} USD left)"
                ),
            )
    return BudgetVerdict(allowed=True, projected_usd=projected_usd)


@dataclass(frozen=True, slots=True, kw_only=True)
class Projection:
    rate_per_hour: float
    hours: float
    usd: float


def project_wake_spend(
    *, cheapest_rate_per_hour: float | None, boot_minutes: float, idle_minutes: float, runtime_cap_minutes: float
) -> Projection:
    """What a wake is projected to spend before the earliest automatic stop (no GPU: nothing)."""
    rate = cheapest_rate_per_hour or 0.0
    minutes = max(0.0, boot_minutes) + max(0.0, idle_minutes)
    if runtime_cap_minutes > 0:
        minutes = min(minutes, runtime_cap_minutes)
    hours = minutes / 60.0
    return Projection(rate_per_hour=rate, hours=hours, usd=rate * hours)
