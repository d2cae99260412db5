"""Budget verdicts and the projected spend of a wake, one named test per rule."""

from __future__ import annotations

import pytest

from thermostat.policy.metering.budget import BudgetPeriod, PodBudget, judge_budget, project_wake_spend


def judge(budget: PodBudget, today: float = 0.0, month: float = 0.0, projected: float = 0.0):  # type: ignore[no-untyped-def]
    return judge_budget(budget, today_usd=today, month_usd=month, projected_usd=projected, pod_name="qwen")


def test_no_budget_is_no_ceiling() -> None:
    assert judge(PodBudget(), today=1e9, month=1e9, projected=1e9).allowed


def test_spend_that_reached_the_daily_budget_is_exhausted_and_names_it() -> None:
    verdict = judge(PodBudget(daily_usd=5.0), today=5.0)
    assert (verdict.allowed, verdict.exhausted, verdict.period) == (False, True, BudgetPeriod.DAILY)
    assert "daily budget of 5.00 USD reached" in verdict.reason


def test_spend_that_reached_the_monthly_budget_is_exhausted() -> None:
    verdict = judge(PodBudget(monthly_usd=50.0), month=50.0)
    assert (verdict.exhausted, verdict.period) == (True, BudgetPeriod.MONTHLY)


def test_a_projection_that_does_not_fit_in_what_is_left_is_refused_but_not_exhausted() -> None:
    verdict = judge(PodBudget(daily_usd=5.0), today=4.0, projected=1.5)
    assert (verdict.allowed, verdict.exhausted, verdict.limit_usd, verdict.spent_usd, verdict.projected_usd) == (
        False,
        False,
        5.0,
        4.0,
        1.5,
    )
    assert "does not fit in the daily budget" in verdict.reason


def test_a_projection_that_fits_exactly_is_allowed() -> None:
    assert judge(PodBudget(daily_usd=5.0), today=4.0, projected=1.0).allowed


def test_the_daily_budget_is_judged_before_the_monthly_one() -> None:
    verdict = judge(PodBudget(daily_usd=1.0, monthly_usd=1.0), today=1.0, month=1.0)
    assert verdict.period is BudgetPeriod.DAILY


def test_a_zero_budget_refuses_every_wake() -> None:
    assert judge(PodBudget(daily_usd=0.0)).exhausted


@pytest.mark.parametrize(
    ("boot", "idle", "cap", "hours"),
    [
        pytest.param(5, 15, 360, 20 / 60, id="boot-plus-idle-window"),
        pytest.param(5, 15, 10, 10 / 60, id="bounded-by-the-runtime-cap"),
        pytest.param(5, 15, 0, 20 / 60, id="cap-0-disables-the-bound"),
    ],
)
def test_the_projection_runs_to_the_earliest_automatic_stop(boot: float, idle: float, cap: float, hours: float) -> None:
    projection = project_wake_spend(
        cheapest_rate_per_hour=1.5, boot_minutes=boot, idle_minutes=idle, runtime_cap_minutes=cap
    )
    assert projection.hours == pytest.approx(hours)
    assert projection.usd == pytest.approx(1.5 * hours)


def test_no_acceptable_gpu_projects_nothing() -> None:
    assert (
        project_wake_spend(cheapest_rate_per_hour=None, boot_minutes=5, idle_minutes=15, runtime_cap_minutes=360).usd
        == 0.0
    )
