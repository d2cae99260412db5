"""A model pod's spend from its billable actions (issue 12, "Pod spend").

Theory of operation. RunPod bills a pod from the moment a start or a create is accepted until a stop or a
terminate is accepted, or until the pod is found gone (RunPod's own 404 answering a stop or terminate, or a `Gone`
record: a pod the controller confirmed no longer exists, policy/wake/pod_gone.py, issue 35). The
ledger holds every billable action exactly once, so the billed intervals are a fold over them in feed order:

    action                         open interval for the pod id?   effect
    Start / Create, ok             no                              open one at the action's time and rate
    Start / Create, ok             yes                             none (the pod already bills)
    Stop / Terminate, ok           yes                             close it at the action's time
    Stop / Terminate, 404 (gone)   yes                             close it at the action's time
    Gone (confirmed gone)          yes                             close it at the observation's time
    anything else                  —                               none (a refused call bills nothing new)

An interval is priced at the rate recorded on the action that opened it; a start with no recorded rate
(an older row, or RunPod's answer carried none) takes the pod's last recorded rate (its create's), else it
is priced at 0 and flagged unpriced. An interval still open is counted to `now`. Spend is split on UTC day
boundaries, per GPU type. No clock is read here: `now` is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta

OPENS = frozenset({"Start", "Create"})
CLOSES = frozenset({"Stop", "Terminate", "Gone"})
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


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendSummary:
    """A pod name's fold so far, kept so a budget check folds only the actions landed since (constant in the
    length of the history): the last position folded, each pod id's recorded rate and GPU, the intervals still
    open, and the USD of the closed ones per UTC day. An open interval is counted to `now` when read."""

    position: int = 0
    rates: Mapping[str, float] = field(default_factory=dict)
    gpus: Mapping[str, str] = field(default_factory=dict)
    open: Mapping[str, BilledInterval] = field(default_factory=dict)
    closed: tuple[BilledInterval, ...] = ()  # only while folding a whole history (billed_intervals)
    closed_usd_by_day: Mapping[date, float] = field(default_factory=dict)


def fold_spend(
    summary: SpendSummary, events: list[BillableEvent] | tuple[BillableEvent, ...], *, keep_closed: bool = False
) -> SpendSummary:
    """The summary after `events` (the table above), those at or before its position ignored."""
    fresh = sorted((e for e in events if e.position > summary.position), key=lambda e: e.position)
    if not fresh:
        return summary
    rate, gpu, open_ = dict(summary.rates), dict(summary.gpus), dict(summary.open)
    done = list(summary.closed)
    by_day = dict(summary.closed_usd_by_day)
    for e in fresh:
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
            closed = replace(interval, end=max(e.at, interval.start))
            if keep_closed:
                done.append(closed)
            for day, _seconds, usd in _by_day(closed, closed.start):
                by_day[day] = by_day.get(day, 0.0) + usd
    return SpendSummary(
        position=fresh[-1].position, rates=rate, gpus=gpu, open=open_, closed=tuple(done), closed_usd_by_day=by_day
    )


def summary_spend(summary: SpendSummary, now: datetime) -> tuple[float, float]:
    """Today's and this month's (UTC) spend of a summary, its open intervals counted to `now`."""
    by_day = dict(summary.closed_usd_by_day)
    for interval in summary.open.values():
        for day, _seconds, usd in _by_day(interval, now):
            by_day[day] = by_day.get(day, 0.0) + usd
    today = now.date()
    month = sum(usd for day, usd in by_day.items() if (day.year, day.month) == (today.year, today.month))
    return by_day.get(today, 0.0), month


def billed_intervals(events: list[BillableEvent] | tuple[BillableEvent, ...]) -> tuple[BilledInterval, ...]:
    """The billed intervals of one pod name's events (the table above), in the order they opened."""
    folded = fold_spend(SpendSummary(position=-(2**63)), events, keep_closed=True)
    return tuple(sorted([*folded.closed, *folded.open.values()], key=lambda i: i.start))


def _by_day(interval: BilledInterval, now: datetime) -> list[tuple[date, float, float]]:
    """An interval split on UTC day boundaries: (day, seconds, USD) of each piece; an open one ends at `now`."""
    pieces = []
    cursor, end = interval.start, interval.end or now
    while cursor < end:
        cut = min(end, _midnight_after(cursor))
        seconds = (cut - cursor).total_seconds()
        pieces.append((cursor.date(), seconds, seconds / 3600.0 * interval.price_per_hour))
        cursor = cut
    return pieces


def _midnight_after(moment: datetime) -> datetime:
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return day + timedelta(days=1)


def spend(events: list[BillableEvent] | tuple[BillableEvent, ...], now: datetime) -> PodSpend:
    """Intervals, per UTC day and GPU type lines, the total, and today's and this month's (UTC) spend."""
    intervals = billed_intervals(events)
    per: dict[tuple[date, str], list[float]] = {}
    for interval in intervals:
        for day, seconds, usd in _by_day(interval, now):
            line = per.setdefault((day, interval.gpu_type), [0.0, 0.0])
            line[0] += seconds
            line[1] += usd
    lines = tuple(SpendLine(day=d, gpu_type=g, seconds=v[0], usd=v[1]) for (d, g), v in sorted(per.items()))
    today = now.date()
    return PodSpend(
        intervals=intervals,
        lines=lines,
        total_usd=sum(line.usd for line in lines),
        today_usd=sum(line.usd for line in lines if line.day == today),
        month_usd=sum(line.usd for line in lines if (line.day.year, line.day.month) == (today.year, today.month)),
    )
