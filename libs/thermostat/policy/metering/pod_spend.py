"""A model pod's spend from its billable actions (issue 12, "Pod spend").

Theory of operation. RunPod bills a pod from the moment a start or a create is accepted until a stop or a
terminate is accepted, or until the pod is found gone (RunPod's own 404 answering a stop or terminate). The
ledger holds every billable action exactly once, so the billed intervals are a fold over them in feed order:

    action                         open interval for the pod id?   effect
    Start / Create, ok             no                              open one at the action's time and rate
    Start / Create, ok             yes                             none (the pod already bills)
    Stop / Terminate, ok           yes                             close it at the action's time
    Stop / Terminate, 404 (gone)   yes                             close it at the action's time
    anything else                  —                               none (a refused call bills nothing new)

An interval is priced at the rate recorded on the action that opened it; a start with no recorded rate
(an older row, or RunPod's answer carried none) takes the pod's last recorded rate (its create's), else it
is priced at 0 and flagged unpriced. An interval still open is counted to `now`. Spend is split on UTC day
boundaries, per GPU type. No clock is read here: `now` is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

OPENS = frozenset({"Start", "Create"})
CLOSES = frozenset({"Stop", "Terminate"})
UNKNOWN_GPU = "unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class BillableEvent:
    """One billable action as the ledger holds it."""

    position: int
    at: datetime
    action: str
    pod_id: str
    ok: bool
    http_status: int | None = None
    gpu_id: str | None = None
    price_per_hour: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BilledInterval:
    pod_id: str
    gpu_type: str
    price_per_hour: float
    start: datetime
    end: datetime | None  # None: still billing
    priced: bool = True

    def seconds(self, now: datetime) -> float:
        return max(0.0, ((self.end or now) - self.start).total_seconds())

    def usd(self, now: datetime) -> float:
        return self.seconds(now) / 3600.0 * self.price_per_hour


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendLine:
    day: date
    gpu_type: str
    seconds: float
    usd: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSpend:
    intervals: tuple[BilledInterval, ...]
    lines: tuple[SpendLine, ...]
    total_usd: float
    today_usd: float
    month_usd: float


def _gone(event: BillableEvent) -> bool:
    return not event.ok and event.http_status == 404


def billed_intervals(events: list[BillableEvent] | tuple[BillableEvent, ...]) -> tuple[BilledInterval, ...]:
    """The billed intervals of one pod name's events (the table above), in the order they opened."""
    ordered = sorted(events, key=lambda e: e.position)
    rate: dict[str, float] = {}
    gpu: dict[str, str] = {}
    open_: dict[str, BilledInterval] = {}
    done: list[BilledInterval] = []
    for e in ordered:
        if not e.pod_id:
            continue  # a create that got no id: nothing known to bill against
        if e.gpu_id:
            gpu[e.pod_id] = e.gpu_id
        if e.action in OPENS and e.ok:
            if e.price_per_hour:
                rate[e.pod_id] = e.price_per_hour
            if e.pod_id in open_:
                continue
            price = rate.get(e.pod_id)
            open_[e.pod_id] = BilledInterval(
                pod_id=e.pod_id,
                gpu_type=gpu.get(e.pod_id, UNKNOWN_GPU),
                price_per_hour=price or 0.0,
                start=e.at,
                end=None,
                priced=price is not None,
            )
        elif e.action in CLOSES and (e.ok or _gone(e)) and e.pod_id in open_:
            interval = open_.pop(e.pod_id)
            done.append(
                BilledInterval(
                    pod_id=interval.pod_id,
                    gpu_type=interval.gpu_type,
                    price_per_hour=interval.price_per_hour,
                    start=interval.start,
                    end=max(e.at, interval.start),
                    priced=interval.priced,
                )
            )
    return tuple(sorted([*done, *open_.values()], key=lambda i: i.start))


def _midnight_after(moment: datetime) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


def spend(events: list[BillableEvent] | tuple[BillableEvent, ...], now: datetime) -> PodSpend:
    """Intervals, per UTC day and GPU type lines, the total, and today's and this month's (UTC) spend."""
    intervals = billed_intervals(events)
    per: dict[tuple[date, str], list[float]] = {}
    for interval in intervals:
        cursor, end = interval.start, interval.end or now
        while cursor < end:
            cut = min(end, _midnight_after(cursor))
            seconds = (cut - cursor).total_seconds()
            line = per.setdefault((cursor.date(), interval.gpu_type), [0.0, 0.0])
            line[0] += seconds
            line[1] += seconds / 3600.0 * interval.price_per_hour
            cursor = cut
    lines = tuple(SpendLine(day=d, gpu_type=g, seconds=v[0], usd=v[1]) for (d, g), v in sorted(per.items()))
    today = now.date()
    return PodSpend(
        intervals=intervals,
        lines=lines,
        total_usd=sum(line.usd for line in lines),
        today_usd=sum(line.usd for line in lines if line.day == today),
        month_usd=sum(line.usd for line in lines if (line.day.year, line.day.month) == (today.year, today.month)),
    )
