"""The pod controller's metric families (docs/operations.md): wakes by outcome and how long they took, billable
calls by action, and the wake leases it took over. Counted where the events happen: a wake as it ends, a billable
call as it is recorded."""

from __future__ import annotations

from thermostat.chassis.metrics import WAIT_BUCKETS, Metrics, takeover_counter

from .repository import ActionEntry


class PodMetrics:
    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.wakes = self.metrics.counter(
            "thermostat_wakes_total",
            "Wakes this replica ran, by the history's outcome (Succeeded, Refused, TimedOut, Failed) and the start "
            "route's result (AlreadyRunning, Started, Created, Waiting, Failed).",
            ["outcome", "result"],
        )
        self.billable_actions = self.metrics.counter(
            "thermostat_billable_actions_total",
            "Billable RunPod calls issued (Start, Create, Terminate, Stop), by action, trigger and whether RunPod "
            "accepted them.",
            ["action", "trigger", "ok"],
        )
        self.wake_seconds = self.metrics.histogram(
            "thermostat_wake_seconds",
            "Seconds a wake this replica ran took, from its start to its answer, by the history's outcome.",
            ["outcome"],
            buckets=WAIT_BUCKETS,
        )
        self.takeover = takeover_counter(self.metrics)

    def wake(self, outcome: str, result: str, seconds: float) -> None:
        self.wakes.labels(outcome=outcome, result=result).inc()
        self.wake_seconds.labels(outcome=outcome).observe(seconds)

    def action(self, entry: ActionEntry) -> None:
        self.billable_actions.labels(action=entry.action, trigger=entry.trigger, ok=str(entry.ok).lower()).inc()
