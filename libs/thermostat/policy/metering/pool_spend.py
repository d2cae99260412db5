"""The pool's spend per tenant and machine type, over a time range (issue 12, "Pool spend").

Theory of operation. A machine bills from its boot to its stop, whether it runs a job or waits warm for the
next one, so machine time is what is priced; job time is the part of it spent on the tenant's jobs (what the
tenant asked for) and is priced alike, for comparison. The ledger holds each machine's start and stop events
(its life) and each job's usage event exactly once:

    input                                     counted in [since, until)
    machine life started s, stopped e         the overlap of [s, e) with the range
    machine life started s, still running     the overlap of [s, now) with the range
    usage event ending at t, d seconds        d, when since <= t < until (a job belongs to the range it ended in)

Each machine is priced at its type's `price_per_hour` (USD per machine-hour) as recorded with its boot, and a
job at its machine's price; time without a price counts its seconds at 0 USD and marks the line
`priced=False`. No clock is read here: `now` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
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
    price_per_hour: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTime:
    """One job's time on a machine, as its usage event records it."""

    tenant_id: str
    machine_type: str
    seconds: float
    ended_at: datetime
    price_per_hour: float | None = None


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
    since: datetime,
    until: datetime,
    now: datetime,
) -> tuple[PoolSpendLine, ...]:
    """A line per (tenant, machine type) with machine or job time in the range, ordered by both."""
    totals: dict[tuple[str, str], list[float]] = {}  # machine s, machine usd, job s, job usd, unpriced s

    def add(key: tuple[str, str], index: int, seconds: float, price: float | None) -> None:
        line = totals.setdefault(key, [0.0] * 5)
        line[index] += seconds
        line[index + 1] += seconds * (price or 0.0) / 3600
        if price is None:
            line[4] += seconds

    for life in machines:
        seconds = machine_seconds_in(life, since=since, until=until, now=now)
        if seconds > 0:
            add((life.tenant_id, life.machine_type), 0, seconds, life.price_per_hour)
    for job in jobs:
        if since <= job.ended_at < until:
            add((job.tenant_id, job.machine_type), 2, job.seconds, job.price_per_hour)
    return tuple(
        PoolSpendLine(
            tenant_id=tenant,
            machine_type=machine_type,
            machine_seconds=line[0],
            machine_usd=line[1],
            job_seconds=line[2],
            job_usd=line[3],
            priced=line[4] == 0,
        )
        for (tenant, machine_type), line in sorted(totals.items())
    )
