"""The pool dispatcher's metric families (docs/operations.md). The hot path (submit → result) only increments and
observes in memory: queue and dispatch latency from times the job's run already holds, the end state from its
completion. Jobs and machines by state are counted on scrape, from partial indexes and the fleet's rows."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from prometheus_client import Counter, Gauge, Histogram

from thermostat.chassis.metrics import WAIT_BUCKETS, Metrics, takeover_counter

from .repository import PoolRepository

LIVE_JOB_STATES = ("queued", "dispatched", "running")
MACHINE_STATES = ("starting", "warm", "busy", "stopping")


class PoolMetrics:
    def __init__(self, metrics: Metrics | None = None) -> None:
        self.metrics = metrics if metrics is not None else Metrics()
        self.jobs = self.metrics.gauge(
            "thermostat_pool_jobs", "Jobs not yet ended, by state (queued, dispatched, running), pool-wide.", ["state"]
        )
        self.jobs_finished = self.metrics.counter(
            "thermostat_pool_jobs_finished_total",
            "Jobs this process ran on a machine to an end, by machine type and end state (completed, failed, "
            "timed_out, cancelled).",
            ["machine_type", "state"],
        )
        self.queue_seconds = self.metrics.histogram(
            "thermostat_pool_queue_seconds",
            "From a job's submit to its payload going out to a machine (0 when a warm machine took it at once).",
            ["machine_type"],
            buckets=WAIT_BUCKETS,
        )
        self.dispatch_seconds = self.metrics.histogram(
            "thermostat_pool_dispatch_seconds",
            "From a job's payload going out to its end being recorded: the worker hop, the job's run, the "
            "completion statement.",
            ["machine_type", "state"],
            buckets=WAIT_BUCKETS,
        )
        self.machines = self.metrics.gauge(
            "thermostat_pool_machines",
            "Machines by state (starting, warm, busy, stopping) and backend (local, docker, runpod, fly), pool-wide.",
            ["state", "backend"],
        )
        self.refused = self.metrics.counter(
            "thermostat_pool_jobs_refused_total",
            "Jobs whose machine could not be reached before any byte was sent (a machine that died while warm), by "
            "machine type, backend, cause (refused, connect_timeout, no_route, unknown_name, tls, network) and "
            "decision: hand_back (the machine retired, the job queued again in its place) or give_up (the job "
            "failed: too many machines refused it). The log line names the machine.",
            ["machine_type", "backend", "cause", "decision"],
        )
        self.boot_failures = self.metrics.counter(
            "thermostat_pool_boot_failures_total",
            "Boots this process gave up on (the provider's start failed, no health answer within the type's boot "
            "timeout, the lease not trusted, a boot released unbooted), by machine type and backend.",
            ["machine_type", "backend"],
        )
        self.pruned = self.metrics.counter(
            "thermostat_pool_pruned_rows_total",
            "Rows retention deleted (POOL_JOB_RETENTION_HOURS, docs/pool-retention.md), by table: pool_jobs (finished "
            "jobs and their results), pool_usage (usage events the ledger took), pool_machine_events (dead machines' "
            "boots and stops the ledger took). Counted by the process that deleted them.",
            ["table"],
        )
        self.fair_share_retirements = self.metrics.counter(
            "thermostat_pool_fair_share_retirements_total",
            "Machines retired to give their fleet slot to a tenant waiting at the fleet cap (fair share), by when: "
            "idle (a warm machine, retired at once) or after_job (a busy one, retired by its job's completion).",
            ["when"],
        )
        self.fleet_cap: Gauge | None = None  # registered only when POOL_MAX_WORKERS_TOTAL is set (fleet_capped)
        self.takeover = takeover_counter(self.metrics)
        # The series each job updates, looked up once per label values rather than per job (a family's labels()
        # validates and locks on every call). These families are never cleared, so a child stays theirs.
        self._queued: dict[str, Histogram] = {}
        self._ended: dict[tuple[str, str], tuple[Counter, Histogram]] = {}

    def sent(self, machine_type: str, submitted_at: datetime) -> None:
        waited = (datetime.now(UTC) - submitted_at).total_seconds()
        queued = self._queued.get(machine_type)
        if queued is None:
            queued = self._queued[machine_type] = self.queue_seconds.labels(machine_type=machine_type)
        queued.observe(max(0.0, waited))

    def finished(self, machine_type: str, state: str, seconds: float) -> None:
        ended = self._ended.get((machine_type, state))
        if ended is None:
            labels = {"machine_type": machine_type, "state": state}
            ended = self._ended[(machine_type, state)] = (
                self.jobs_finished.labels(**labels),
                self.dispatch_seconds.labels(**labels),
            )
        count, seconds_to_end = ended
        count.inc()
        seconds_to_end.observe(max(0.0, seconds))

    def refusal(self, machine_type: str, backend: str, cause: str, decision: str) -> None:
        """A machine refused a job (thermostat.policy.pool.hand_back): rare, so the series is looked up each time."""
        self.refused.labels(machine_type=machine_type, backend=backend, cause=cause, decision=decision).inc()

    def boot_failed(self, machine_type: str, backend: str) -> None:
        """A boot failed (Fleet.boot_failed, where the store records it): rare, so the series is looked up each time."""
        self.boot_failures.labels(machine_type=machine_type, backend=backend).inc()

    def fair_share_retired(self, when: str) -> None:
        """A machine gave its slot up for fair share (`idle` or `after_job`): rare, looked up each time."""
        self.fair_share_retirements.labels(when=when).inc()

    def types_known(self, types: Iterable[tuple[str, str]]) -> None:
        """Show each catalogue type's boot failures (name, backend) at 0 before its first, so increase() sees it."""
        for machine_type, backend in types:
            self.boot_failures.labels(machine_type=machine_type, backend=backend)

    def fleet_capped(self, cap: int | None) -> None:
        """Export the fleet's machine cap (POOL_MAX_WORKERS_TOTAL); no series at all while it is unset."""
        if cap is None:
            return
        if self.fleet_cap is None:
            self.fleet_cap = self.metrics.gauge(
                "thermostat_pool_fleet_cap",
                "The most machines the pool runs at once, all types and backends (POOL_MAX_WORKERS_TOTAL); absent "
                "while unset.",
            )
        self.fleet_cap.set(cap)

    def count_on_scrape(self, repository: PoolRepository, backends: Iterable[str]) -> None:
        """Refresh jobs and machines by state before each scrape (two small reads, bounded by the scrape); every
        configured backend shows its states, zeros included."""
        configured = tuple(backends)

        async def jobs() -> None:
            counts = await repository.jobs.live_job_counts()
            for state in LIVE_JOB_STATES:
                self.jobs.labels(state=state).set(counts.get(state, 0))

        async def machines() -> None:
            counts = await repository.machines.machine_counts_by_backend()
            self.machines.clear()  # a backend with no machine left shows none rather than its last count
            for backend in sorted({*configured, *(backend for _, backend in counts)}):
                for state in MACHINE_STATES:
                    self.machines.labels(state=state, backend=backend).set(counts.get((state, backend), 0))

        self.metrics.on_scrape("pool-jobs", jobs)
        self.metrics.on_scrape("pool-machines", machines)
