"""The dispatcher: one process's pool, a facade over the engine's parts (engine/), which it builds and wires.

Where to look:
- which warm machine gets a job, and which machines start: engine/placement.py;
- what happens when a machine dies mid-job (or before the job went out): engine/runner.py, engine/machine_run.py,
  engine/hand_back.py;
- a submit, alone or in a group commit: engine/intake.py; a sync submit's or WaitJob's wait: engine/waits.py;
- a machine's boot and stop (the plans placement and the scaler return, as values): engine/fleet.py;
- the instance lease and its fence: engine/ownership.py; the periodic pass: engine/scaler.py;
- the catalogue and the backends: engine/catalogue.py; the store: repository/ (by aggregate).

The parts call down and answer up with values (a submit's claim, a boot's first job, a run's `RunEnded`, whose
sequel is thermostat.policy.pool.run_end's); the one call up is placement's poke (`WantsPlacement`), and what the
process alone knows is one value the facade owns (`Local`: engine/local.py). The import order is a layers contract
in pyproject.toml, so no part reaches up.

The hot path is one statement per state change: a submit inserts the job and claims a warm machine together; a
completion writes the terminal state, the usage event and hands the machine its next queued job together. A job
taken at submit costs two statements, submit and complete. Decisions are the pool policies'
(thermostat.policy.pool). bench/pool_throughput.py and bench/pool_dispatch_overhead.py measure this path.

Time comes in as one chassis `Clock`, which every engine part reads and waits with: its monotonic reading stamps
idle times, deadlines and boots, and its sleep is what store retries, health polls, the drain and the scaler wait
with. The instance lease judges its trust on the lease store's clock (the one it was handed).

Ordering tests hold a run at the repository's aggregates (a wrapped method, tests/integration/pool_dispatcher/seams.py),
and at three parts' own seams where no injected call marks the step (Runner, Waits, Placement: each documents its
own; production passes none).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.policy.pool.backends import BackendChoice
from thermostat.policy.pool.cancel import decide_cancel
from thermostat.policy.pool.departure import Departure, grace_error
from thermostat.policy.pool.hint import HintDecision
from thermostat.policy.pool.jobs import JobState
from thermostat.policy.pool.machine_type import BackendKind, Catalogue
from thermostat.policy.pool.submit_batch import BatchLimits
from thermostat.policy.pool.submit_options import SubmitError, SubmitOptions
from thermostat.providers.pool.backend import Backend
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.store.lease import LeaseStore

from .engine.catalogue import Backends, CatalogueCache, CatalogueState
from .engine.drivers import Drivers
from .engine.fleet import Fleet, RetirePlan
from .engine.hand_back import HandBack
from .engine.intake import Intake
from .engine.local import Local, SubmitKey
from .engine.machine_run import RunParts
from .engine.ownership import Ownership, lease_name
from .engine.placement import Placement
from .engine.runner import Runner
from .engine.scaler import ABANDONED, Scaler
from .engine.tasks import Tasks
from .engine.waits import Waits
from .engine.writes import Writes
from .metrics import PoolMetrics
from .repository import (
    CATALOGUE,
    JOBS_DONE,
    RELEASED,
    JobView,
    PoolRepository,
    Subscription,
    job_done_channel,
)

__all__ = ["ABANDONED", "CancelOutcome", "CatalogueState", "Dispatcher", "ShuttingDown", "lease_name"]

log = logging.getLogger("thermostat.pool_dispatcher")

DRAIN_POLL_SECONDS = 0.05
"""How often a shutdown's drain counts its in-flight jobs again (one indexed count: pool_jobs_owned)."""


class ShuttingDown(Exception):
    """A submit or hint reached a dispatcher whose shutdown drain began: nothing was queued or started; retry (the
    servicer answers UNAVAILABLE, which gRPC clients and the edge treat as retryable; another replica takes it)."""

    def __init__(self, instance_id: str) -> None:
        super().__init__(
            f"pool dispatcher instance {instance_id} is shutting down (a deploy): nothing was queued; retry"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    """The job after a cancel and the REST status (200, or 409 when it finished another way)."""

    job: JobView
    status_code: int


class Dispatcher:
    """One dispatcher process's pool: its owned rows, its backend's machines, its scaler."""

    def __init__(
        self,
        *,
        repository: PoolRepository,
        leases: LeaseStore,
        backends: Mapping[BackendKind, Backend],
        client: WorkerClient,
        catalogue: Catalogue,
        instance_id: str | None = None,
        lease_seconds: float = 30.0,
        scaler_seconds: float = 10.0,
        health_poll_seconds: float = 0.5,
        max_workers_total: int | None = None,
        max_payload_bytes: int = 32 * 1024 * 1024,
        clock: Clock = SYSTEM_CLOCK,
        run_scaler: bool = True,
        missing_settings: Mapping[BackendKind, str] | None = None,
        metrics: PoolMetrics | None = None,
        batch_limits: BatchLimits | None = None,
        backend_choice: BackendChoice | None = None,
    ) -> None:
        self.repo = repository
        self.metrics = metrics or PoolMetrics()
        self.client = client
        self.instance_id = instance_id or f"pool-{uuid.uuid4().hex[:12]}"
        self.channel = job_done_channel(self.instance_id)  # where another process's completion wakes a sync wait here
        self.lease_seconds = lease_seconds
        self.scaler_seconds = scaler_seconds
        self.health_poll_seconds = health_poll_seconds
        self.max_workers_total = max_workers_total
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        self._run_scaler = run_scaler
        self._closing = False
        self._submitting = 0  # submits past their draining check, not yet answered
        self._listener: Subscription | None = None

        self.local = Local()  # this process's own state of its pool, which the parts read and keep
        wants_placement = self._wants_placement
        self.tasks = Tasks()
        self.drivers = Drivers(self.local)
        self.ownership = Ownership(leases, instance_id=self.instance_id, lease_seconds=lease_seconds)
        self.kinds = Backends(backends, missing_settings, backend_choice)  # what each backend kind here serves
        self.backends = self.kinds.by_kind  # one per configured kind, keyed by its value (as rows record it)
        self.catalogues = CatalogueCache(
            self.repo, self.kinds, catalogue, self.metrics, local=self.local, wants_placement=wants_placement
        )
        self.metrics.fleet_capped(max_workers_total)
        self.writes = Writes(self.repo, self.ownership, self.drivers, clock)
        self.waits = Waits(self.repo, wants_placement, clock)
        self.intake = Intake(
            repo=self.repo, ownership=self.ownership, catalogue=self.catalogues, drivers=self.drivers,
            tasks=self.tasks, wants_placement=wants_placement, channel=self.channel,
            limits=batch_limits or BatchLimits(), local=self.local,
        )  # fmt: skip
        self.fleet = Fleet(
            repo=self.repo, ownership=self.ownership, backends=self.kinds, drivers=self.drivers,
            writes=self.writes, intake=self.intake, waits=self.waits, wants_placement=wants_placement,
            metrics=self.metrics, clock=clock, health_poll_seconds=health_poll_seconds, local=self.local,
        )  # fmt: skip
        hand_back = HandBack(
            repo=self.repo, ownership=self.ownership, catalogue=self.catalogues, writes=self.writes,
            metrics=self.metrics,
        )  # fmt: skip
        parts = RunParts(
            repo=self.repo, ownership=self.ownership, client=client, catalogue=self.catalogues, drivers=self.drivers,
            writes=self.writes, waits=self.waits, intake=self.intake, hand_back=hand_back, metrics=self.metrics,
            clock=clock, local=self.local, channel=self.channel,
        )  # fmt: skip
        self.runner = Runner(
            parts=parts, fleet=self.fleet, tasks=self.tasks, wants_placement=wants_placement,
            capped=max_workers_total is not None,
        )  # fmt: skip
        self.placement = Placement(
            repo=self.repo, ownership=self.ownership, catalogue=self.catalogues, drivers=self.drivers,
            runner=self.runner, fleet=self.fleet, tasks=self.tasks, metrics=self.metrics,
            max_workers_total=max_workers_total, clock=clock, local=self.local,
        )  # fmt: skip
        self.scaler = Scaler(
            repo=self.repo, ownership=self.ownership, catalogue=self.catalogues, drivers=self.drivers,
            fleet=self.fleet, placement=self.placement, tasks=self.tasks, waits=self.waits, metrics=self.metrics,
            listen=self._listen, every_seconds=scaler_seconds, clock=clock, local=self.local,
        )  # fmt: skip

    def _wants_placement(self, *, at_cap: bool = False) -> None:
        """What a part below placement calls when queued work may be placeable now (engine/local.py)."""
        self.placement.poke(at_cap=at_cap)

    # lifecycle

    @property
    def draining(self) -> bool:
        """A shutdown's drain began: no new work here (drain)."""
        return self.local.draining

    async def start(self) -> None:
        """Take the instance lease (the same term back under an old id), recover, listen, start the scaler."""
        term = await self.ownership.take()
        jobs, machines = await self.repo.ownership.recover_own(self.ownership.owner)
        if jobs or machines:
            log.warning(
                "instance %s took back its rows: %d in-flight job(s) failed, %d machine(s) to check",
                self.instance_id,
                jobs,
                machines,
            )
        await self.catalogues.refresh()
        self.catalogues.warn_unservable(self.catalogues.catalogue, self.catalogues.state.version)
        await self._listen()
        await self.fleet.recover()
        adopted = await self.fleet.adopt_released()  # a deploy's machines: no lease to wait out
        if adopted:
            log.info("instance %s adopted %d warm machine(s) a deploy released", self.instance_id, adopted)
        if self._run_scaler:
            await self.scaler.loop.start()
        log.info("pool dispatcher instance %s started (lease term %d)", self.instance_id, term)

    async def drain(self, grace_seconds: float) -> bool:
        """A shutdown's first step: take no new work (a submit or hint now is refused, retryable: ShuttingDown;
        placement stops here, so queued jobs wait for another process) and wait up to `grace_seconds` for this
        process's in-flight jobs to finish (their results reach their callers); a machine whose job finishes takes no
        next one here, and goes warm for another process to claim. Whether none is left in flight."""
        self.local.draining = True
        deadline = self.clock.monotonic() + grace_seconds
        while self._submitting and self.clock.monotonic() < deadline:  # submits past their check land first
            await self.clock.sleep(DRAIN_POLL_SECONDS)
        if not self.ownership.started:
            return True
        while True:
            in_flight = await self.repo.jobs.in_flight(self.ownership.owner)
            left = deadline - self.clock.monotonic()
            if in_flight == 0:
                return True
            if left <= 0:
                log.warning("instance %s: %d job(s) in flight at the end of its grace", self.instance_id, in_flight)
                return False
            await self.clock.sleep(min(DRAIN_POLL_SECONDS, left))

    async def close(self, departure: Departure = Departure.STOP_FLEET, *, grace_seconds: float = 0.0) -> None:
        """Leave: `RELEASE` (a deploy's SIGTERM) keeps the warm machines running for the next process (released,
        their idle clock in the row); `STOP_FLEET` (Ctrl-C, or a direct close) stops every machine of this process.
        A drain (`drain`, or here with `grace_seconds`) comes first; then the jobs still in flight are requeued
        (never sent) or failed (running), and the lease goes (thermostat.policy.pool.departure)."""
        if not self.draining and grace_seconds > 0:
            await self.drain(grace_seconds)
        self.local.draining = True
        self._closing = True
        await self.scaler.loop.stop()
        await asyncio.gather(*self.intake.close(), return_exceptions=True)
        await self.tasks.cancel_all()
        if self.ownership.started:
            with contextlib.suppress(Exception):
                if departure is Departure.RELEASE:
                    await self._release(grace_seconds)
                else:
                    await self._stop_fleet()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        with contextlib.suppress(Exception):
            await self.ownership.release()

    async def _release(self, grace_seconds: float) -> None:
        released = await self.repo.ownership.release_own(
            self.ownership.owner, grace_error(self.instance_id, grace_seconds)
        )
        for machine_id, provider_id in await self.repo.machines.stopping(self.ownership.owner):
            await self.fleet.finish_stop(machine_id, provider_id)
        log.info(
            "instance %s released %d warm machine(s) for the next process; %d job(s) requeued (never sent), "
            "%d failed (running past the grace), %d machine(s) stopped (mid-boot or mid-job)",
            self.instance_id,
            released.released,
            released.requeued,
            released.failed,
            released.stopping,
        )

    async def _stop_fleet(self) -> None:
        for own in await self.repo.machines.own_machines(self.ownership.owner):
            await self.fleet.retire(
                RetirePlan(
                    machine_id=own.machine.id,
                    provider_id=own.provider_id,
                    reason="dispatcher shutting down",
                    states=("starting", "warm", "busy", "stopping"),
                )
            )
        await self.repo.ownership.recover_own(self.ownership.owner, any_term=False)

    async def _listen(self) -> None:
        """LISTEN on a connection of its own (re-established by the scaler pass when it drops)."""
        if self._listener is not None and not self._listener.is_closed():
            return
        if self._listener is not None:  # lost with the store: its connection goes back to the pool
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        on_job_done = self.waits.on_job_done
        self._listener = await self.repo.listen(
            {
                JOBS_DONE: on_job_done,
                self.channel: on_job_done,
                CATALOGUE: self._on_catalogue,
                RELEASED: self._on_released,
            }
        )

    def _on_catalogue(self, _version: str) -> None:
        if not self._closing:
            self.tasks.spawn(self.catalogues.refresh(), "pool-catalogue-refresh")

    def _on_released(self, instance: str) -> None:
        """A deploy released its warm machines: adopt them now, not at the next scaler pass."""
        if not self.draining and instance != self.instance_id:
            self.tasks.spawn(self.fleet.adopt_released(), "pool-adopt-released")

    # catalogue and backends

    # submit, wait, hint, cancel

    async def submit(
        self,
        *,
        tenant_id: str,
        options: SubmitOptions,
        payload: bytes,
        trace: dict[str, str],
        waiting: bool = False,
        remaining: float | None = None,
    ) -> JobView:
        """Queue the job, or hand it to a warm machine at once. `waiting`: a sync wait (wait_finished) follows here,
        so a completion in another process notifies this one. `remaining`: seconds left of the call (None: no
        deadline). A submit of a key expected to queue joins that key's batch (engine/intake.py). ShuttingDown once a
        drain began: nothing is queued, and the caller retries (another replica takes it)."""
        if self.draining:
            raise ShuttingDown(self.instance_id)
        self._submitting += 1
        try:
            accepted = await self.intake.submit(
                tenant_id=tenant_id, options=options, payload=payload, trace=trace, waiting=waiting,
                remaining=remaining,
            )  # fmt: skip
            if accepted.claim is not None:
                machine_type = options.machine_type
                key = SubmitKey(tenant_id, machine_type.name, machine_type.image)
                self.runner.start(accepted.claim, key, accepted.driver)
            return accepted.job
        finally:
            self._submitting -= 1

    async def hint(self, tenant_id: str, machine_type: str) -> HintDecision | SubmitError:
        """Start one machine for the tenant unless one is warm or starting, within both caps (ShuttingDown once a
        drain began: a machine booted now would be this process's to give away at once)."""
        if self.draining:
            raise ShuttingDown(self.instance_id)
        return await self.placement.hint(tenant_id, machine_type)

    async def cancel(self, job_id: str, tenant_id: str, build_id: str) -> CancelOutcome | None:
        """Cancel at once; a running job's machine gets the build cancel with its token. None: not found."""
        cancelled = await self.repo.jobs.cancel(job_id, tenant_id, build_id)
        self.waits.changed(job_id)
        if cancelled is not None and cancelled.prior == JobState.RUNNING and cancelled.worker_id is not None:
            address = await self.repo.machines.machine_address(cancelled.worker_id)
            if address is not None and address[0] is not None:
                reply = await self.client.cancel(address[0], address[1], build_id)
                if not reply.accepted:
                    log.info(
                        "job %s: the machine did not accept the cancel (%s %s); the job runs out",
                        job_id,
                        reply.status,
                        reply.error,
                    )
        job = await self.repo.jobs.get_job(job_id, tenant_id)
        if job is None:
            return None
        if cancelled is not None:
            return CancelOutcome(job=job, status_code=200)
        return CancelOutcome(job=job, status_code=decide_cancel(job.state).status_code)
