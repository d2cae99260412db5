"""Metering's metric families (docs/operations.md): ledger lag per feed, entries landed, spend and what is left of
each budget, and the ingest lease taken over. Lag, spend and budgets are read on scrape (the feeds' rows, each
configured pod's spend summary, this month's pool time, the tenants with a ceiling), bounded by the scrape's
refresh timeout; the landed counter is counted by the ingest loop as it lands a page."""

from __future__ import annotations

from collections.abc import Sequence

from thermostat.chassis.metrics import Metrics, takeover_counter
from thermostat.policy.metering.budget import PodBudget

from .repository import FeedState

MAX_TENANTS = 1000
"""Tenants with a ceiling exported at most (a bounded read)."""


class MeteringMetrics:
    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.lag_events = self.metrics.gauge(
            "thermostat_ledger_lag_events",
            "Entries a feed's head was ahead of the ledger's stored position at the last read.",
            ["feed"],
        )
        self.lag_seconds = self.metrics.gauge(
            "thermostat_ledger_lag_seconds",
            "Seconds since a feed was last read successfully (database clock): about LEDGER_POLL_SECONDS while "
            "caught up, growing while the feed is unreadable or no replica ingests.",
            ["feed"],
        )
        self.landed = self.metrics.counter(
            "thermostat_ledger_entries_landed_total",
            "Entries this replica landed in the ledger (new ones; a replayed entry lands nothing), by feed.",
            ["feed"],
        )
        self.spend = self.metrics.gauge(
            "thermostat_spend_usd",
            "Spend in USD so far this UTC day or month, of each configured pod (subject=pod) and each pool tenant "
            "with machine time or a budget (subject=tenant).",
            ["subject", "name", "period"],
        )
        self.remaining = self.metrics.gauge(
            "thermostat_budget_remaining_usd",
            "USD left under each set budget (never below 0), by subject (pod, tenant), name and period (day, month).",
            ["subject", "name", "period"],
        )
        self.takeover = takeover_counter(self.metrics)

    def feeds(self, feeds: Sequence[FeedState]) -> None:
        self.lag_events.clear()
        self.lag_seconds.clear()
        for feed in feeds:
            self.lag_events.labels(feed=feed.source).set(feed.lag_events)
            if feed.lag_seconds is not None:
                self.lag_seconds.labels(feed=feed.source).set(feed.lag_seconds)

    def clear_spend(self) -> None:
        self.spend.clear()
        self.remaining.clear()

    def spent(self, subject: str, name: str, budget: PodBudget, today_usd: float, month_usd: float) -> None:
        for period, spent, limit in (("day", today_usd, budget.daily_usd), ("month", month_usd, budget.monthly_usd)):
            self.spend.labels(subject=subject, name=name, period=period).set(spent)
            if limit is not None:
                self.remaining.labels(subject=subject, name=name, period=period).set(max(0.0, limit - spent))
