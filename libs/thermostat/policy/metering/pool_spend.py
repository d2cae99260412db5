"""The pool's spend per tenant and machine type, over a time range (issue 12, "Pool spend").

Theory of operation. A machine bills from its boot to its stop, whether it runs a job or waits warm for the
next one, so machine time is what is priced; job time is the part of it spent on the tenant's jobs (what the
tenant asked for) and is priced alike, for comparison. The ledger holds each machine's start and stop events
(its life) and each job's usage event exactly once:

    input                                     counted in [since, until)
    machine life started s, stopped e         the overlap of [s, e) with the range
    machine life started s, still running     the overlap of [s, now) with the range
    usage event ending at t, d seconds        d, when since <= t < until (a job belongs to the range it ended in)

A machine type's `price_per_hour` (USD per machine-hour) prices both; a type without one is reported with its
seconds, 0 USD and `priced=False`. No clock is read here: `now` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineLife:
    """One machine's billed life: boot to stop (`stopped_at` None: still running)."""

    machine_id: str
    tenant_id: str
    machine_type: str
    started_at: datetime
    stopped_at: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTime:
    """One job's time on a machine, as its usage event records it."""

    tenant_id: str
    machine_type: str
    seconds: float
    ended_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSpendLine:
    tenant_id: str
    machine_type: str
    machine_seconds: float
    machine_usd: float
    job_seconds: float
    job_usd: float
    priced: bool


def machine_seconds_in(life: MachineLife, *, since: datetime, until: datetime, now: datetime) -> float:
    """The seconds of a machine's life inside [since, until), an open life counted to `now`."""
    end = min(life.stopped_at or now, until, now)
    start = max(life.started_at, since)
    return max(0.0, (end - start).total_seconds())


def pool_spend(
    machines: Iterable[MachineLife],
    jobs: Iterable[JobTime],
    *,
    prices: Mapping[str, float | None],
    since: datetime,
    until: datetime,
    now: datetime,
) -> tuple[PoolSpendLine, ...]:
    """A line per (tenant, machine type) with machine or job time in the range, ordered by both."""
    machine_time: dict[tuple[str, str], float] = {}
    job_time: dict[tuple[str, str], float] = {}
    for life in machines:
        seconds = machine_seconds_in(life, since=since, until=until, now=now)
        if seconds > 0:
            key = (life.tenant_id, life.machine_type)
            machine_time[key] = machine_time.get(key, 0.0) + seconds
    for job in jobs:
        if since <= job.ended_at < until:
            key = (job.tenant_id, job.machine_type)
            job_time[key] = job_time.get(key, 0.0) + job.seconds
    lines = []
    for key in sorted(machine_time.keys() | job_time.keys()):
        tenant, machine_type = key
        price = prices.get(machine_type)
        rate = (price or 0.0) / 3600
        machine_s, job_s = machine_time.get(key, 0.0), job_time.get(key, 0.0)
        lines.append(
            PoolSpendLine(
                tenant_id=tenant,
                machine_type=machine_type,
                machine_seconds=machine_s,
                machine_usd=machine_s * rate,
                job_seconds=job_s,
                job_usd=job_s * rate,
                priced=price is not None,
            )
        )
    return tuple(lines)
