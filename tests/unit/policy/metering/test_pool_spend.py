"""Pool spend: machine time boot to stop (idle warm time included), job time by when the job ended, priced
per machine type, per tenant and type, clipped to the range."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from thermostat.policy.metering.pool_spend import JobTime, MachineLife, PoolSpendLine, machine_seconds_in, pool_spend

T0 = datetime(2026, 11, 30, tzinfo=UTC)
DAY = timedelta(days=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def life(
    start: float, stop: float | None, *, tenant: str = "acme", machine_type: str = "gpu", price: float | None = 1.0
) -> MachineLife:
    return MachineLife(
        machine_id=f"m-{start}",
        tenant_id=tenant,
        machine_type=machine_type,
        started_at=at(start),
        stopped_at=None if stop is None else at(stop),
        price_per_hour=price,
    )


@pytest.mark.parametrize(
    ("start", "stop", "since", "until", "now", "seconds"),
    [
        pytest.param(0, 3600, 0, 86400, 90000, 3600, id="stopped-life-inside-the-range-counts-whole"),
        pytest.param(0, None, 0, 86400, 600, 600, id="running-life-counts-to-now"),
        pytest.param(-600, 600, 0, 86400, 90000, 600, id="life-begun-before-the-range-is-clipped-at-its-start"),
        pytest.param(86000, 87000, 0, 86400, 90000, 400, id="life-past-the-range-is-clipped-at-its-end"),
        pytest.param(90000, 91000, 0, 86400, 99000, 0, id="life-outside-the-range-counts-nothing"),
        pytest.param(0, None, 0, 86400, 99000, 86400, id="running-life-stops-at-the-range-end"),
    ],
)
def test_machine_time_is_the_overlap_of_its_life_with_the_range(
    start: float, stop: float | None, since: float, until: float, now: float, seconds: float
) -> None:
    assert machine_seconds_in(life(start, stop), since=at(since), until=at(until), now=at(now)) == seconds


def test_idle_warm_time_bills_as_machine_time_and_jobs_only_as_job_time() -> None:
    """A machine up an hour that ran one ten-minute job: an hour of machine time, ten minutes of job time."""
    lines = pool_spend(
        [life(0, 3600, price=2.0)],
        [JobTime(tenant_id="acme", machine_type="gpu", seconds=600, ended_at=at(700), price_per_hour=2.0)],
        since=T0,
        until=T0 + DAY,
        now=at(99999),
    )
    assert lines == (
        PoolSpendLine(
            tenant_id="acme",
            machine_type="gpu",
            machine_seconds=3600,
            machine_usd=2.0,
            job_seconds=600,
            job_usd=pytest.approx(2.0 / 6),
            priced=True,
        ),
    )


def test_a_job_belongs_to_the_range_it_ended_in() -> None:
    jobs = [
        JobTime(tenant_id="acme", machine_type="gpu", seconds=100, ended_at=at(-1)),
        JobTime(tenant_id="acme", machine_type="gpu", seconds=50, ended_at=at(0)),
        JobTime(tenant_id="acme", machine_type="gpu", seconds=25, ended_at=at(86400)),
    ]
    (line,) = pool_spend([], jobs, since=T0, until=T0 + DAY, now=at(99999))
    assert (line.job_seconds, line.machine_seconds) == (50, 0)


def test_lines_are_per_tenant_and_machine_type_in_order() -> None:
    machines = [
        life(0, 3600, tenant="globex"),
        life(0, 1800, tenant="acme", machine_type="cpu"),
        life(0, 1800, tenant="acme"),
        life(1800, 3600, tenant="acme"),
    ]
    lines = pool_spend(machines, [], since=T0, until=T0 + DAY, now=at(99999))
    assert [(x.tenant_id, x.machine_type, x.machine_seconds) for x in lines] == [
        ("acme", "cpu", 1800),
        ("acme", "gpu", 3600),
        ("globex", "gpu", 3600),
    ]


def test_time_without_a_price_counts_at_zero_and_marks_the_line_unpriced() -> None:
    """One machine priced at 1 USD/h, one booted before its type had a price: both hours, 1 USD, unpriced."""
    machines = [life(0, 3600), life(1, 3601, price=None)]
    (line,) = pool_spend(machines, [], since=T0, until=T0 + DAY, now=at(99999))
    assert (line.machine_seconds, line.machine_usd, line.priced) == (7200, 1.0, False)


def test_a_price_of_zero_is_priced_at_zero() -> None:
    (line,) = pool_spend([life(0, 3600, price=0.0)], [], since=T0, until=T0 + DAY, now=at(99999))
    assert (line.machine_usd, line.priced) == (0.0, True)


def test_each_machine_is_priced_at_the_price_recorded_with_its_boot() -> None:
    """The type's price changed between two boots: each hour at its own machine's price."""
    (line,) = pool_spend(
        [life(0, 3600, price=1.0), life(0, 3600, price=3.0)], [], since=T0, until=T0 + DAY, now=at(9e4)
    )
    assert line.machine_usd == 4.0
