"""Pod spend: billed intervals folded from billable actions, one named test per rule of the table."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from thermostat.policy.metering.pod_spend import (
    UNKNOWN_GPU,
    BillableEvent,
    SpendSummary,
    billed_intervals,
    fold_spend,
    spend,
    summary_spend,
)

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
_positions = iter(range(1, 1_000_000))


def event(
    action: str,
    minutes: float,
    *,
    pod_id: str = "p1",
    ok: bool = True,
    status: int | None = 200,
    gpu: str | None = None,
    price: float | None = None,
) -> BillableEvent:
    return BillableEvent(
        position=next(_positions),
        at=T0 + timedelta(minutes=minutes),
        action=action,
        pod_id=pod_id,
        ok=ok,
        http_status=status,
        gpu_id=gpu,
        price_per_hour=price,
    )


def test_a_create_opens_an_interval_priced_at_its_rate_and_a_stop_closes_it() -> None:
    (interval,) = billed_intervals([event("Create", 0, gpu="A100", price=1.2), event("Stop", 30)])
    assert (interval.start, interval.end, interval.price_per_hour, interval.gpu_type) == (
        T0,
        T0 + timedelta(minutes=30),
        1.2,
        "A100",
    )
    assert interval.usd(T0) == pytest.approx(0.6)


def test_a_start_without_a_rate_takes_the_pods_last_recorded_rate() -> None:
    events = [event("Create", 0, gpu="A100", price=2.0), event("Stop", 60), event("Start", 120), event("Stop", 150)]
    second = billed_intervals(events)[1]
    assert (second.price_per_hour, second.gpu_type, second.priced) == (2.0, "A100", True)


def test_a_start_with_its_own_rate_is_priced_at_it() -> None:
    events = [event("Create", 0, price=2.0), event("Stop", 60), event("Start", 120, price=2.5), event("Stop", 180)]
    assert billed_intervals(events)[1].price_per_hour == 2.5


def test_a_start_with_no_rate_known_is_priced_at_zero_and_flagged_unpriced() -> None:
    (interval,) = billed_intervals([event("Start", 0), event("Stop", 60)])
    assert (interval.price_per_hour, interval.priced, interval.gpu_type) == (0.0, False, UNKNOWN_GPU)


def test_an_open_interval_is_counted_to_now() -> None:
    result = spend([event("Create", 0, price=3.0)], T0 + timedelta(minutes=20))
    assert result.intervals[0].end is None
    assert result.total_usd == pytest.approx(1.0)


def test_a_terminate_closes_the_interval() -> None:
    (interval,) = billed_intervals([event("Create", 0, price=1.0), event("Terminate", 45, status=204)])
    assert interval.end == T0 + timedelta(minutes=45)


def test_a_pod_found_gone_closes_the_interval() -> None:
    (interval,) = billed_intervals([event("Create", 0, price=1.0), event("Stop", 10, ok=False, status=404)])
    assert interval.end == T0 + timedelta(minutes=10)


def test_a_pod_confirmed_gone_closes_the_interval_at_the_observation() -> None:
    """Issue 35: a Gone record (no call of ours: the pod was found gone) closes it, and a second one closes nothing."""
    events = [event("Create", 0, price=1.0), event("Gone", 14, status=None), event("Gone", 20, status=None)]
    (interval,) = billed_intervals(events)
    assert interval.end == T0 + timedelta(minutes=14)


def test_a_refused_stop_keeps_the_pod_billing() -> None:
    (interval,) = billed_intervals([event("Create", 0, price=1.0), event("Stop", 10, ok=False, status=500)])
    assert interval.end is None


def test_a_refused_start_opens_nothing() -> None:
    assert billed_intervals([event("Start", 0, ok=False, status=409, price=1.0)]) == ()


def test_a_second_start_of_a_billing_pod_opens_nothing_new() -> None:
    intervals = billed_intervals([event("Create", 0, price=1.0), event("Start", 5, price=1.0), event("Stop", 10)])
    assert [(i.start, i.end) for i in intervals] == [(T0, T0 + timedelta(minutes=10))]


def test_a_stop_of_a_pod_not_billing_closes_nothing() -> None:
    assert billed_intervals([event("Stop", 0)]) == ()


def test_a_create_without_a_pod_id_bills_nothing_known() -> None:
    assert billed_intervals([event("Create", 0, pod_id="", ok=False, status=0, price=1.0)]) == ()


def test_pods_are_billed_separately() -> None:
    events = [
        event("Create", 0, pod_id="a", price=1.0),
        event("Create", 0, pod_id="b", price=2.0),
        event("Terminate", 60, pod_id="a"),
    ]
    assert spend(events, T0 + timedelta(minutes=60)).total_usd == pytest.approx(3.0)


def test_events_are_folded_in_feed_order_not_list_order() -> None:
    create, stop = event("Create", 0, price=1.0), event("Stop", 30)
    assert billed_intervals([stop, create]) == billed_intervals([create, stop])


def test_spend_is_split_at_utc_midnight_per_gpu_type() -> None:
    start = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    events = [
        BillableEvent(position=1, at=start, action="Create", pod_id="p", ok=True, gpu_id="A100", price_per_hour=2.0),
        BillableEvent(position=2, at=start + timedelta(hours=1), action="Stop", pod_id="p", ok=True),
    ]
    result = spend(events, start + timedelta(hours=2))
    assert [(line.day, line.gpu_type, line.seconds) for line in result.lines] == [
        (date(2026, 11, 30), "A100", 1800.0),
        (date(2026, 12, 1), "A100", 1800.0),
    ]
    assert (result.today_usd, result.month_usd) == (pytest.approx(1.0), pytest.approx(1.0))


def test_month_spend_counts_only_the_current_utc_month() -> None:
    events = [event("Create", 0, price=1.0), event("Stop", 60)]
    result = spend(events, datetime(2026, 12, 2, tzinfo=UTC))
    assert (result.total_usd, result.month_usd, result.today_usd) == (pytest.approx(1.0), 0.0, 0.0)


# The budget check's summary: folded a page at a time, it answers what the whole history's fold answers.

HISTORY = [
    event("Create", -14 * 60, pod_id="s1", gpu="A100", price=1.5),
    event("Stop", -8 * 60, pod_id="s1"),  # crosses a UTC midnight
    event("Start", 0, pod_id="s1"),
    event("Stop", 45, pod_id="s1"),
    event("Create", 60, pod_id="s2", gpu="H100", price=3.0),  # still open
]


def test_a_summary_folded_page_by_page_spends_what_the_whole_history_spends() -> None:
    now = T0 + timedelta(hours=3)
    summary = SpendSummary()
    for page in (HISTORY[:1], HISTORY[1:3], HISTORY[3:]):
        summary = fold_spend(summary, page)
    whole = spend(HISTORY, now)
    assert summary_spend(summary, now) == pytest.approx((whole.today_usd, whole.month_usd))


def test_a_summarys_open_interval_is_counted_to_now() -> None:
    summary = fold_spend(SpendSummary(), HISTORY)
    (today_early, _), (today_late, _) = (
        summary_spend(summary, T0 + timedelta(hours=2)),
        summary_spend(summary, T0 + timedelta(hours=3)),
    )
    assert today_late - today_early == pytest.approx(3.0)  # one more hour of s2 at 3.0/h


def test_a_summary_ignores_actions_at_or_before_its_position() -> None:
    summary = fold_spend(SpendSummary(), HISTORY)
    assert fold_spend(summary, HISTORY[2:]) is summary
