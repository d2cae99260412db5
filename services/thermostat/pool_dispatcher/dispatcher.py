"""The dispatcher: submit, execute, complete, place and boot, cancel, hints, the catalogue and the scaler.

One `Dispatcher` per process. Its rows in the store are owned under its instance lease
(`pool-instance:<id>`, renewed by a LeaseKeeper); every write matches owner and term (repository.py). The
hot path is one statement per state change: a submit inserts the job and claims a warm machine together;
a completion writes the terminal state, the usage event and hands the machine its next queued job
together. Placement ("count the queue, insert the machine rows") runs under one advisory lock across
processes; boots run outside it. Decisions are the pool policies' (thermostat.policy.pool).

Placement's claims (an idle warm machine's next job, a booted machine's first) hand a job over as
`dispatched`; right before the payload goes out one conditional statement (mark_sent) makes it `running`, so
a cancel, a reclaim or a newer incarnation of this instance that landed since the claim wins and nothing is
sent or metered. The two hot-path claims are themselves the job's conditional send when the lease is trusted
for the call before their statement: a completion that hands its machine the next queued job (fenced by
owner and term), and a submit that a warm machine takes (the job's id is new with that statement, so no
cancel can name it before the send). The job is `running` from that statement and goes out right after its
answer: a job taken at submit costs two statements, submit and complete.
Behind a backlog (the last submit of its tenant, type and image here queued with placement unable to act, behind
a deep queue) a submit joins a short batch instead, and one statement queues the batch's jobs (group commit:
thermostat.policy.pool.submit_batch; _submit_batched). A single submit of the key first sends its gathering batch
out and waits for the key's batches to answer, so its claim never passes a batched job ahead of it.
Before any call the lease guards (sending a job, starting or stopping a machine) the process checks that its
instance lease is trusted for longer than `call_budget` (a quarter of the lease): a process that cannot renew
stops acting before anyone reclaims.
Each start takes a new lease term (LeaseKeeper `new_incarnation`), so an old process of the same instance
id that is merely stalled is fenced off by term while the new one takes its rows back at once.

A machine that could not be reached before any byte of a job was sent (it died while warm) is retired and its job
handed back to the queue in its place, at most once (thermostat.policy.pool.hand_back; hand_back.py; issue 29).

Waiting (sync submit, WaitJob) uses in-process events, set by this process's completions and by
notifications for other processes'; NOTIFY is a hint, so every wait also re-reads the job once a second. A
completion notifies only where a wait may be in another process: the channel of the process whose sync
submit waits (recorded on the job by the submit; `job_done_channel`), and every process's `pool_jobs_done`
when a WaitJob watches the job (its first read marks the row, so a completion either lands before and is
read, or after and notifies). Failures and cancels outside the runner (reclaim, boot, cancel) notify
`pool_jobs_done`. A sync wait whose job this process completed takes the job and result from the completion
(no read, no notification); one completed elsewhere takes a small result from the notification (no read
either) and reads a larger one, or a failure, once. A submit that queued places only when placement can act
(policy: placement_may_act). The catalogue is cached with its version: `LISTEN pool_catalogue` and every
scaler pass refresh it. bench/pool_throughput.py and bench/pool_dispatch_overhead.py measure this path.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from thermostat.chassis import tracing
from thermostat.chassis.clock import Clock as LeaseClock
from thermostat.policy.pool.backends import REQUIRED_SETTINGS, check_backends
from thermostat.policy.pool.cancel import decide_cancel
from thermostat.policy.pool.health import judge_health, machines_to_probe
from thermostat.policy.pool.hint import HintDecision, decide_hint
from thermostat.policy.pool.job_outcome import ReplyKind, decide_job_outcome
from thermostat.policy.pool.jobs import TERMINAL_STATES, JobState
from thermostat.policy.pool.machine_type import (
    BackendKind,
    Catalogue,
    CatalogueRejected,
    MachineType,
    catalogue_to_json,
    parse_catalogue,
)
from thermostat.policy.pool.machines import Machine, MachineState, is_stale
from thermostat.policy.pool.placement import Demand, placement_may_act, plan_placement
from thermostat.policy.pool.reaping import plan_reaping
from thermostat.policy.pool.store_retry import HeldAction, resume_held, retry_delay
from thermostat.policy.pool.submit_batch import (
    BatchLimits,
    Outlook,
    goes_out_now,
    joins_batch,
    outlook_after_submit,
    queued_to_count,
)
from thermostat.policy.pool.submit_options import SubmitError, SubmitOptions
from thermostat.policy.pool.unbooted import PlacedMachine, Recovery, plan_unbooted
from thermostat.providers.pool.backend import Backend, BackendError, MachineHandle, MachineSpec
from thermostat.providers.pool.worker_client import WorkerClient
from thermostat.store.connections import TRANSIENT_STORE_ERRORS, borrow
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.lease import LeaseStore

from .hand_back import hand_back_refused
from .metrics import PoolMetrics
from .repository import (
    JOBS_DONE,
    Assignment,
    Finished,
    JobView,
    Owner,
    PoolRepository,
    QueuedSubmit,
    Subscription,
    job_done_channel,
    parse_job_done,
)

log = logging.getLogger("thermostat.pool_dispatcher")

LEASE_PREFIX = "pool-instance:"
CALL_BUDGET_SHARE = 0.25
"""A call the instance lease guards is made only while the lease is trusted for longer than this share of it."""
REPOLL_SECONDS = 1.0
"""A wait re-reads its job this often even without a notification (NOTIFY is a hint, not a delivery)."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


def lease_name(instance_id: str) -> str:
    return LEASE_PREFIX + instance_id


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    """The job after a cancel and the REST status (200, or 409 when it finished another way)."""

    job: JobView
    status_code: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogueState:
    catalogue: Catalogue
    version: int  # 0: the configured one, never stored


@dataclass(kw_only=True)
class Hooks:
    """Test seams at the points two actors race: each is awaited, if set, before the named statement."""

    before_machine_ready: Callable[[str], Awaitable[None]] | None = None
    before_complete: Callable[[str], Awaitable[None]] | None = None
    before_insert_machines: Callable[[], Awaitable[None]] | None = None
    before_send: Callable[[str], Awaitable[None]] | None = None  # before mark_sent: dispatched claims only
    before_execute: Callable[[str], Awaitable[None]] | None = None  # before the worker call, every job
    before_record_started: Callable[[str], Awaitable[None]] | None = None
    before_take_next: Callable[[str], Awaitable[None]] | None = None  # by machine id
    before_wait: Callable[[str], Awaitable[None]] | None = None  # a sync or WaitJob wait, before it registers
    before_submit_batch: Callable[[list[str]], Awaitable[None]] | None = None  # by the batch's job ids
    before_hand_back: Callable[[str], Awaitable[None]] | None = None  # a refused job, before it is queued again
    before_place: Callable[[], Awaitable[None]] | None = None  # every placement pass, before it takes the lock
    before_provider_stop: Callable[[str], Awaitable[None]] | None = None  # a retired machine, by id


@dataclass(eq=False)
class _Waiter:
    event: asyncio.Event = field(default_factory=asyncio.Event)
    finished: Finished | None = None  # set by this process's own completion: nothing to re-read
    announced: bytes | None = None  # the result another process's completion notified: nothing to re-read


NOTIFIED_RESULT_BYTES = 2048
"""A completion notifies its result with the job id up to this size (base64, within NOTIFY's 8,000 bytes), so
a sync wait in another process answers without reading the job back; a larger one is read."""


RECENT_DONE = 4096
"""Job ids whose notification arrived lately, so a wait that registers after its job's NOTIFY reads at once."""

ABANDONED = "the pool lost track of the job while it ran (its sender here ended unexpectedly); not retried"
"""A running job's error when no task of its process drives it any more (reconcile)."""

UNANSWERED_CLAIMS = 65536
"""Submits whose statement did not answer that the scaler pass still looks for (their claim may land late)."""


_Key = tuple[str, str, str]
"""A submit's (tenant, machine type, image): what one submit statement or batch is about."""


@dataclass(eq=False)
class _Batch:
    """Submits of one key gathering for one submit_queued statement (thermostat.policy.pool.submit_batch)."""

    key: _Key
    members: list[tuple[QueuedSubmit, asyncio.Future[JobView]]] = field(default_factory=list)
    window: asyncio.TimerHandle | None = None
    payload_bytes: int = 0
    sent: bool = False


@dataclass
class _Waiters:
    waiting: dict[str, list[_Waiter]] = field(default_factory=dict)
    recent: dict[str, None] = field(default_factory=dict)  # insertion-ordered, bounded
    # jobs whose completion statement this process has in flight: their own NOTIFY can overtake the
    # statement's answer, and would send their waiters to read what the answer brings anyway
    completing: set[str] = field(default_factory=set)

    def add(self, job_id: str) -> _Waiter:
        waiter = _Waiter()
        self.waiting.setdefault(job_id, []).append(waiter)
        return waiter

    def remove(self, job_id: str, waiter: _Waiter) -> None:
        listed = self.waiting.get(job_id, [])
        if waiter in listed:
            listed.remove(waiter)
        if not listed:
            self.waiting.pop(job_id, None)

    def wake(self, job_id: str) -> None:
        self.recent[job_id] = None
        if len(self.recent) > RECENT_DONE:
            del self.recent[next(iter(self.recent))]
        for waiter in self.waiting.get(job_id, []):
            waiter.event.set()

    def finish(self, job_id: str, finished: Finished) -> None:
        for waiter in self.waiting.get(job_id, []):
            waiter.finished = finished
            waiter.event.set()

    def announce(self, job_id: str, result: bytes) -> None:
        for waiter in self.waiting.get(job_id, []):
            waiter.announced = result


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
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        run_scaler: bool = True,
        hooks: Hooks | None = None,
        missing_settings: Mapping[BackendKind, str] | None = None,
        lease_clock: LeaseClock | None = None,
        metrics: PoolMetrics | None = None,
        batch_limits: BatchLimits | None = None,
    ) -> None:
        self.repo = repository
        self.metrics = metrics or PoolMetrics()
        # one per configured kind, keyed by its value (as the machine rows record it); a type picks by `backend`
        self.backends: dict[str, Backend] = {str(kind): backend for kind, backend in backends.items()}
        self.missing_settings = dict(missing_settings or {})
        self.client = client
        self.instance_id = instance_id or f"pool-{uuid.uuid4().hex[:12]}"
        self.channel = job_done_channel(self.instance_id)  # where another process's completion wakes a sync wait here
        self.repoll_seconds = REPOLL_SECONDS
        self.lease_seconds = lease_seconds
        self.call_budget = lease_seconds * CALL_BUDGET_SHARE
        self.scaler_seconds = scaler_seconds
        self.health_poll_seconds = health_poll_seconds
        self.max_workers_total = max_workers_total
        self.max_payload_bytes = max_payload_bytes
        self.clock = clock
        self.sleep = sleep
        self.hooks = hooks or Hooks()
        self._configured = catalogue
        self.state = CatalogueState(catalogue=catalogue, version=0)
        self._keeper = LeaseKeeper(
            leases,
            name=lease_name(self.instance_id),
            holder=self.instance_id,
            ttl=lease_seconds,
            clock=lease_clock,
            new_incarnation=True,  # fences an older process of this id that is stalled, not dead
        )
        self._run_scaler = run_scaler
        self._owner: Owner | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._scaler: asyncio.Task[None] | None = None
        self._waiters = _Waiters()
        self._listener: Subscription | None = None
        self._idle_since: dict[str, float] = {}
        self._placing = asyncio.Lock()
        self._place_again = False
        self._closing = False
        # machines a task of this process drives (a run or a boot), by that task's token: a step resuming a
        # machine after a lost answer never takes over one another task drives
        self._driving: dict[str, object] = {}
        # submits whose claim statement is out: a machine they claimed is driven only once they answer
        self._submitting: set[asyncio.Event] = set()
        # ids of jobs whose submit statement raised (store error, cancelled call): a claim of theirs that landed
        # anyway is on a machine nothing drives and was never sent (its sender never started), even if running
        self._unanswered: dict[str, None] = {}  # insertion-ordered, bounded
        # machines whose boot began here and ended on an unexpected error: never booted again (boot_unbooted)
        self._boot_died: set[str] = set()
        # group commit of submits that will queue (thermostat.policy.pool.submit_batch): what the last submit of
        # each key said of the next, the key's batch still gathering, and its batches sent and not yet answered
        self.batch_limits = batch_limits or BatchLimits()
        self._outlook: dict[_Key, Outlook] = {}
        self._gathering: dict[_Key, _Batch] = {}
        self._batches_out: dict[_Key, set[asyncio.Task[None]]] = {}
        self._batches_sent: dict[_Key, int] = {}  # how many went out, for a completion racing one (_run_jobs)
        self._singles_waiting: dict[_Key, int] = {}  # single submits waiting for the key's batches to answer

    # lifecycle

    @property
    def owner(self) -> Owner:
        if self._owner is None:
            raise RuntimeError("the dispatcher has not started")
        return self._owner

    @property
    def catalogue(self) -> Catalogue:
        return self.state.catalogue

    async def start(self) -> None:
        """Take the instance lease (the same term back under an old id), recover, listen, start the scaler."""
        lease = await self._keeper.campaign(retry_interval=min(1.0, self.lease_seconds / 3))
        self._owner = Owner(self.instance_id, lease.term)
        jobs, machines = await self.repo.ownership.recover_own(self.owner)
        if jobs or machines:
            log.warning(
                "instance %s took back its rows: %d in-flight job(s) failed, %d machine(s) to check",
                self.instance_id,
                jobs,
                machines,
            )
        await self.refresh_catalogue()
        self._warn_unservable(self.catalogue, self.state.version)
        await self._listen()
        await self._recover_machines()
        if self._run_scaler:
            self._scaler = asyncio.create_task(self._scaler_loop(), name=f"pool-scaler-{self.instance_id}")
        log.info("pool dispatcher instance %s started (lease term %d)", self.instance_id, lease.term)

    async def close(self) -> None:
        """Stop the scaler and every machine of this process; fail its in-flight jobs; release the lease."""
        self._closing = True
        if self._scaler is not None:
            self._scaler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scaler
        for batch in list(self._gathering.values()):  # its callers get their jobs, not a cancelled write
            self._send_batch(batch)
        await asyncio.gather(*(task for out in self._batches_out.values() for task in out), return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._owner is not None:
            with contextlib.suppress(Exception):
                for own in await self.repo.machines.own_machines(self.owner):
                    await self._stop_machine(
                        own.machine.id,
                        own.provider_id,
                        reason="dispatcher shutting down",
                        states=("starting", "warm", "busy", "stopping"),
                    )
                await self.repo.ownership.recover_own(self.owner, any_term=False)
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        with contextlib.suppress(Exception):
            await self._keeper.release()

    def trusted_for_call(self) -> bool:
        """Whether the instance lease stays trusted for longer than a guarded call may take."""
        return self._keeper.remaining_trust() > self.call_budget

    def _spawn(self, coroutine: Awaitable[None], name: str) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _listen(self) -> None:
        """LISTEN on a connection of its own (re-established by the scaler pass when it drops)."""
        if self._listener is not None and not self._listener.is_closed():
            return
        if self._listener is not None:  # lost with the store: its connection goes back to the pool
            with contextlib.suppress(Exception):
                await self._listener.close()
            self._listener = None
        self._listener = await self.repo.listen(
            {JOBS_DONE: self._on_job_done, self.channel: self._on_job_done, "pool_catalogue": self._on_catalogue}
        )

    def _on_job_done(self, payload: str) -> None:
        job_id, result = parse_job_done(payload)
        if job_id in self._waiters.completing:
            self._waiters.recent[job_id] = None  # the completion in flight here wakes its waiters itself
            return
        if result is not None:
            self._waiters.announce(job_id, result)
        self._waiters.wake(job_id)

    def _on_catalogue(self, _version: str) -> None:
        if not self._closing:
            self._spawn(self.refresh_catalogue(), "pool-catalogue-refresh")

    # catalogue

    async def refresh_catalogue(self) -> None:
        """Apply the stored catalogue when it is newer than this process's copy."""
        stored = await self.repo.catalogue.read_catalogue()
        if stored is None or stored[0] <= self.state.version:
            return
        version, body = stored
        parsed = parse_catalogue(body)
        if not isinstance(parsed, Catalogue):  # stored only after validation: a newer release's shape
            log.error("stored catalogue version %d does not parse here: %s", version, parsed.detail)
            return
        self.state = CatalogueState(catalogue=parsed, version=version)
        self._outlook.clear()  # caps may have changed
        log.info("catalogue version %d: %s", version, ", ".join(parsed.names) or "(empty)")
        self._warn_unservable(parsed, version)

    # backends

    def check_catalogue(self, catalogue: Catalogue) -> Catalogue | CatalogueRejected:
        """The catalogue, or why this process's backends cannot serve it (PUT's 400)."""
        configured = [BackendKind(kind) for kind in self.backends]
        return check_backends(catalogue, configured=configured, missing_settings=self.missing_settings)

    def backend_refusal(self, machine_type: MachineType) -> str | None:
        """Why this process cannot start machines of the type (its backend is not configured), or None."""
        kind = machine_type.backend
        if kind in self.backends:
            return None
        setting = self.missing_settings.get(kind) or REQUIRED_SETTINGS.get(kind, "its settings")
        return f"machine type {machine_type.name}: the {kind.value} backend is not configured: set {setting}"

    def _warn_unservable(self, catalogue: Catalogue, version: int) -> None:
        """A catalogue applied at start or from the store is not refused (the process would never come up to
        take the PUT that fixes it); its unservable types are logged loudly and refused per job instead."""
        checked = self.check_catalogue(catalogue)
        if isinstance(checked, CatalogueRejected):
            log.error(
                "catalogue version %d cannot be fully served by this process (jobs of these types are refused "
                "until the settings are fixed or the catalogue is replaced): %s",
                version,
                checked.detail,
            )

    def _backend(self, kind: str) -> Backend:
        backend = self.backends.get(kind)
        if backend is None:
            raise BackendError(f"the {kind} backend is not configured in this process")
        return backend

    async def replace_catalogue(self, catalogue: Catalogue) -> int:
        """Store the whole catalogue; removed types' queued jobs fail; every process applies it at once."""
        import json

        version, failed = await self.repo.catalogue.replace_catalogue(
            json.dumps(catalogue_to_json(catalogue, admin=True)), catalogue.names
        )
        self.state = CatalogueState(catalogue=catalogue, version=version)
        self._outlook.clear()  # caps may have changed
        log.info("catalogue replaced (version %d, %d queued job(s) of removed types failed)", version, failed)
        self._poke_placement()
        return version

    async def type_named(self, name: str) -> MachineType | None:
        """The type from the catalogue, re-reading the stored one before refusing a name."""
        found = self.catalogue.get(name)
        if found is None and await self.repo.catalogue.catalogue_version() > self.state.version:
            await self.refresh_catalogue()
            found = self.catalogue.get(name)
        return found

    # submit, wait, result

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
        deadline). A submit of a key expected to queue joins that key's batch (_submit_batched)."""
        machine_type = options.machine_type
        key = (tenant_id, machine_type.name, machine_type.image)
        if joins_batch(
            outlook=self._outlook.get(key),
            remaining_seconds=remaining,
            limits=self.batch_limits,
            single_waiting=key in self._singles_waiting,
        ):
            return await self._submit_batched(key, options, payload, trace, waiting)
        if key in self._gathering or self._batches_out.get(key):
            self._singles_waiting[key] = self._singles_waiting.get(key, 0) + 1
            try:
                await self._batches_answered(key)
            finally:
                self._singles_waiting[key] -= 1
                if not self._singles_waiting[key]:
                    del self._singles_waiting[key]
        job_id = str(uuid.uuid4())
        answered = asyncio.Event()
        self._submitting.add(answered)
        try:
            # a warm machine's claim is the job's send when the lease is trusted for the call now, as before mark_sent
            send_now = self.trusted_for_call()
            try:
                submitted = await self.repo.jobs.submit(
                    job_id=job_id,
                    tenant_id=tenant_id,
                    machine_type=machine_type.name,
                    image=machine_type.image,
                    priority=options.priority,
                    session_id=options.session_id,
                    timeout_seconds=options.timeout_seconds,
                    payload=payload,
                    owner=self.owner,
                    trace=trace,
                    send_now=send_now,
                    done_channel=self.channel if waiting else None,
                    count_queued=queued_to_count(max_workers=machine_type.max_workers, limits=self.batch_limits),
                )
            except BaseException:
                self._unanswered_submit(job_id)
                raise
            assignment = submitted.assignment
            if assignment is not None:
                self._spawn(
                    self._drive(assignment, tenant_id, machine_type.name, machine_type.image),
                    f"pool-run-{assignment.job_id}",
                )
        finally:
            self._submitting.discard(answered)
            answered.set()
        self._outlook[key] = outlook_after_submit(
            claimed=assignment is not None,
            live_machines=submitted.live_machines,
            idle_machines=submitted.idle_machines,
            queued_jobs=submitted.queued_jobs,
            max_workers=machine_type.max_workers,
            limits=self.batch_limits,
        )
        if assignment is None and placement_may_act(
            live_machines=submitted.live_machines,
            idle_machines=submitted.idle_machines,
            max_workers=machine_type.max_workers,
        ):
            self._poke_placement()
        return submitted.job

    def _unanswered_submit(self, job_id: str) -> None:
        self._unanswered[job_id] = None
        if len(self._unanswered) > UNANSWERED_CLAIMS:
            del self._unanswered[next(iter(self._unanswered))]

    async def _submit_batched(
        self, key: _Key, options: SubmitOptions, payload: bytes, trace: dict[str, str], waiting: bool
    ) -> JobView:
        """Join the key's batch and answer with its statement. A caller gone (cancelled, its deadline) before
        the batch's statement is written (the window, or a wait for a connection) leaves it, and nothing of it is
        queued; once the statement is written its job is queued, as a single submit's whose statement was sent."""
        job = QueuedSubmit(
            job_id=str(uuid.uuid4()),
            priority=options.priority,
            session_id=options.session_id,
            timeout_seconds=options.timeout_seconds,
            payload=payload,
            trace=trace,
            done_channel=self.channel if waiting else None,
        )
        answer: asyncio.Future[JobView] = asyncio.get_running_loop().create_future()
        batch = self._gathering.get(key)
        if batch is None:
            batch = self._gathering[key] = _Batch(key=key)
            batch.window = asyncio.get_running_loop().call_later(
                self.batch_limits.max_delay_seconds, self._send_batch, batch
            )
        batch.members.append((job, answer))
        batch.payload_bytes += len(payload)
        if goes_out_now(members=len(batch.members), payload_bytes=batch.payload_bytes, limits=self.batch_limits):
            self._send_batch(batch)
        return await answer

    def _send_batch(self, batch: _Batch) -> None:
        """The batch goes out: its members still waiting are written by one statement, in arrival order."""
        if batch.sent:
            return
        batch.sent = True
        if batch.window is not None:
            batch.window.cancel()
        if self._gathering.get(batch.key) is batch:
            del self._gathering[batch.key]
        members = [(job, answer) for job, answer in batch.members if not answer.done()]
        if not members:
            return
        self._batches_sent[batch.key] = self._batches_sent.get(batch.key, 0) + 1
        out = self._batches_out.setdefault(batch.key, set())
        task: asyncio.Task[None] = asyncio.ensure_future(self._write_batch(batch.key, members))
        task.set_name(f"pool-submit-batch-{members[0][0].job_id}")
        self._tasks.add(task)
        out.add(task)

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            out.discard(task)
            if not out and self._batches_out.get(batch.key) is out:
                del self._batches_out[batch.key]

        task.add_done_callback(done)

    async def _write_batch(self, key: _Key, members: list[tuple[QueuedSubmit, asyncio.Future[JobView]]]) -> None:
        """One submit_queued statement for the batch. Each member gets its own job, or the statement's error as
        a single submit would (its job may have been queued with the answer lost: it runs, as a lost single's)."""
        tenant_id, type_name, _ = key
        jobs = [job for job, _ in members]
        answers = {job.job_id: answer for job, answer in members}
        try:
            if self.hooks.before_submit_batch is not None:
                await self.hooks.before_submit_batch([job.job_id for job in jobs])
            machine_type = self.catalogue.get(type_name)
            max_workers = machine_type.max_workers if machine_type is not None else None
            count = queued_to_count(max_workers=max_workers, limits=self.batch_limits)
            # a caller gone before the statement (its deadline, while the batch waited for a connection) has
            # nothing queued, as a single submit cancelled before its statement
            batch = await self.repo.jobs.submit_queued(
                tenant_id, type_name, jobs, count_queued=count, wanted=lambda job_id: not answers[job_id].done()
            )
        except BaseException as error:
            # no claim to look for later (a batch claims no machine): nothing joins the unanswered set
            for answer in answers.values():
                if answer.done():
                    continue
                if isinstance(error, asyncio.CancelledError):
                    answer.cancel()
                else:
                    answer.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        if batch is None:
            return
        for view in batch.jobs:
            if not answers[view.id].done():
                answers[view.id].set_result(view)
        self._outlook[key] = outlook_after_submit(
            claimed=False,
            live_machines=batch.live_machines,
            idle_machines=batch.idle_machines,
            queued_jobs=batch.queued_jobs,
            max_workers=max_workers,
            limits=self.batch_limits,
        )
        if placement_may_act(
            live_machines=batch.live_machines, idle_machines=batch.idle_machines, max_workers=max_workers
        ):
            self._poke_placement()  # a machine went idle, or one may start, since the last answer here

    async def _batches_answered(self, key: _Key) -> None:
        """Before a single submit of the key: its batch still gathering goes out now, and every batch of the
        key answers first, so the single statement sees their jobs ahead of it (priority, then arrival)."""
        gathering = self._gathering.get(key)
        if gathering is not None:
            self._send_batch(gathering)
        out = self._batches_out.get(key)
        if out:
            await asyncio.wait(list(out))

    async def _place_after_batches(self, key: _Key) -> None:
        out = self._batches_out.get(key)
        if out:
            await asyncio.wait(list(out))
        self._poke_placement()

    def _may_take(self, tenant_id: str, machine_type: str, image: str) -> None:
        """A machine of the key went idle here: its next submit has its own statement, which can claim it."""
        key = (tenant_id, machine_type, image)
        self._outlook.pop(key, None)
        gathering = self._gathering.get(key)
        if gathering is not None:  # its answer sees the machine idle and pokes placement: no wait for the window
            self._send_batch(gathering)

    async def wait_finished(self, job: JobView, timeout: float) -> Finished:
        """A job this caller just submitted, once terminal (with its result) or as it stands when `timeout` runs
        out. This process's own completion hands over the job and result with no read; another process's
        arrives by NOTIFY and is read once (job and result together). A re-read that finds the job still
        queued pokes placement: the backstop for a completion that raced its submit."""
        if self.hooks.before_wait is not None:
            await self.hooks.before_wait(job.id)
        deadline = self.clock() + timeout
        waiter = self._waiters.add(job.id)
        try:
            latest = Finished(job=job, result=None)
            stale = job.id in self._waiters.recent  # its notification came before this wait began
            while True:
                if waiter.finished is not None:
                    return waiter.finished
                if waiter.announced is not None:
                    completed = replace(job, state=str(JobState.COMPLETED), has_result=True)
                    return Finished(job=completed, result=waiter.announced)
                remaining = deadline - self.clock()
                if stale or remaining <= 0:
                    waiter.event.clear()
                    read = await self.repo.jobs.get_job_result(job.id, job.tenant_id)
                    if read is None:
                        return latest
                    latest = read
                    state = JobState(read.job.state)
                    if state in TERMINAL_STATES or remaining <= 0:
                        return read
                    if state is JobState.QUEUED:
                        self._poke_placement()
                    remaining = deadline - self.clock()  # the read took a while: the wait is that much shorter
                stale = True  # a wake-up, or a second without one: read again
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, min(remaining, self.repoll_seconds))):
                        await waiter.event.wait()
        finally:
            self._waiters.remove(job.id, waiter)

    async def wait(
        self, job_id: str, tenant_id: str, timeout: float, *, since_state: str | None = None
    ) -> JobView | None:
        """The job once terminal (or no longer in `since_state`), or as it stands when `timeout` runs out;
        None when it is not the tenant's. The first read marks the job watched (registered first, so a completion
        after it notifies and wakes this wait; one before it is what the read finds)."""
        if self.hooks.before_wait is not None:
            await self.hooks.before_wait(job_id)
        deadline = self.clock() + timeout
        waiter = self._waiters.add(job_id)
        try:
            job, marked = await self.repo.jobs.watch_job(job_id, tenant_id)
            if marked and job is not None and job.state == JobState.QUEUED:
                # a machine freed while the mark held the row passed the job over (SKIP LOCKED) and went idle
                self._poke_placement()
            while True:
                remaining = deadline - self.clock()
                moved = since_state is not None and job is not None and job.state != since_state
                if job is None or moved or JobState(job.state) in TERMINAL_STATES or remaining <= 0:
                    return job
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can drop a cancellation (the caller gone)
                # that lands as the event fires, and this loop would then poll on until its deadline
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, self.repoll_seconds)):
                        await waiter.event.wait()
                waiter.event.clear()  # before the read: a wake-up after it is for the next wait
                job = await self.repo.get_job(job_id, tenant_id)
        finally:
            self._waiters.remove(job_id, waiter)

    # execute and complete

    async def _durably(self, what: str, write: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The write's answer once the store takes it, and whether an attempt failed first (its answer may have
        been lost after it landed). Writes are fenced by owner and term, so writing again is safe: a lost
        lease answers as "no longer ours". Only transient store errors are retried."""
        attempt = 0
        while True:
            try:
                return await write(), attempt > 0
            except TRANSIENT_STORE_ERRORS as error:
                attempt += 1
                delay = retry_delay(attempt)
                if attempt == 1 or delay >= retry_delay(attempt + 1):  # the first, then one line per capped wait
                    log.warning("%s: the store did not answer (%s); writing again in %.2f s", what, error, delay)
                await self.sleep(delay)

    def _drive(
        self, assignment: Assignment, tenant_id: str, machine_type: str, image: str
    ) -> Coroutine[Any, Any, None]:
        """The run of a machine this process just claimed, registered as its driver before the run starts."""
        driver = object()
        self._driving[assignment.machine_id] = driver
        return self._run(assignment, tenant_id, machine_type, image, driver=driver)

    def _release(self, machine_id: str, driver: object) -> None:
        if self._driving.get(machine_id) is driver:
            del self._driving[machine_id]

    async def _held(self, machine_id: str, driver: object) -> tuple[str | None, Assignment | None, str | None]:
        """After a write whose answer was lost: the machine's state, the job to resume on it and its provider id,
        read back. (None, None, None): the machine is no longer this process's. A job another task of this
        process drives (a submit claiming the machine meanwhile, awaited here) is not resumed."""
        hold, _ = await self._durably(
            f"machine {machine_id}: read back", lambda: self.repo.machines.machine_hold(machine_id, self.owner)
        )
        in_flight = list(self._submitting)  # a claim the read saw is one of these, or already registered
        await asyncio.gather(*(event.wait() for event in in_flight))
        if hold is None:
            return None, None, None
        if self._driving.get(machine_id, driver) is not driver:
            return hold.machine_state, None, hold.provider_id
        action = resume_held(JobState(hold.job_state) if hold.job_state else None)
        if action is HeldAction.NOTHING or hold.job is None:
            return hold.machine_state, None, hold.provider_id
        log.warning("machine %s: resuming job %s after a lost store answer (%s)", machine_id, hold.job.job_id, action)
        return hold.machine_state, replace(hold.job, sent=action is HeldAction.SEND), hold.provider_id

    async def _take_next(self, machine_id: str, image: str, driver: object) -> Assignment | None:
        """take_next, written until the store answers; a lost answer is read back from the machine."""
        self._driving.setdefault(machine_id, driver)
        if self.hooks.before_take_next is not None:
            await self.hooks.before_take_next(machine_id)
        assignment, retried = await self._durably(
            f"machine {machine_id}: take_next", lambda: self.repo.jobs.take_next(machine_id, image, self.owner)
        )
        if assignment is None and retried:
            assignment = (await self._held(machine_id, driver))[1]
        if assignment is None:
            self._release(machine_id, driver)
        return assignment

    async def _run(
        self,
        assignment: Assignment | None,
        tenant_id: str,
        machine_type: str,
        image: str,
        *,
        driver: object | None = None,
    ) -> None:
        """Send jobs to one machine until it has no next job: each completion hands it the next in line. Its
        store writes are written until they land (a task ending on a store error would leave its rows under a
        live owner that no reclaim touches)."""
        if assignment is None:
            return
        driver = driver if driver is not None else object()
        machine_id = assignment.machine_id
        self._driving[machine_id] = driver
        try:
            await self._run_jobs(assignment, tenant_id, machine_type, image, driver)
        finally:
            self._release(machine_id, driver)

    async def _run_jobs(
        self, assignment: Assignment | None, tenant_id: str, machine_type: str, image: str, driver: object
    ) -> None:
        endpoint, token = (assignment.endpoint, assignment.token) if assignment else (None, None)
        # marked running before this task (a submit's claim, or a boot resuming a job a lost answer marked): the
        # lease was checked before that statement, and is again now that it answered, before anything goes out
        resumed = assignment is not None and assignment.sent
        while assignment is not None:
            if resumed and assignment.sent and not self.trusted_for_call():
                # marked running by a statement that outlasted the lease's trust (a slow store), never sent
                log.warning("job %s not sent: the lease is no longer trusted for the call; requeued", assignment.job_id)
                await self._requeue(assignment, marked=True)
                return
            resumed = False
            if endpoint is None or token is None:
                address = await self.repo.machines.machine_address(assignment.machine_id)
                if address is None:
                    return
                endpoint, token = address
            if endpoint is None:
                return
            if not assignment.sent:  # claimed dispatched: the conditional send comes now
                if self.hooks.before_send is not None:
                    await self.hooks.before_send(assignment.job_id)
                if not self.trusted_for_call():
                    log.warning(
                        "job %s not sent: the instance lease is not trusted for the call; it waits in the queue again",
                        assignment.job_id,
                    )
                    await self._requeue(assignment, marked=False)
                    return
                job_id, machine_id = assignment.job_id, assignment.machine_id
                (sent, freed), retried = await self._durably(
                    f"job {job_id}: mark_sent",
                    functools.partial(self.repo.jobs.mark_sent, job_id, machine_id, self.owner),
                )
                if sent and retried and not self.trusted_for_call():  # the outage outlasted the lease's trust
                    log.warning("job %s not sent: the lease lapsed while the store was away; requeued", job_id)
                    await self._requeue(assignment, marked=True)
                    return
                if not sent:
                    log.info("job %s was cancelled or taken over before it was sent: not sent", assignment.job_id)
                    self._waiters.wake(assignment.job_id)
                    if not freed:
                        return
                    self._idle_since[assignment.machine_id] = self.clock()
                    self._may_take(tenant_id, machine_type, image)
                    current = self.catalogue.get(machine_type)
                    if current is None or current.image != image:
                        return
                    assignment = await self._take_next(assignment.machine_id, image, driver)
                    resumed = True
                    continue
            if self.hooks.before_execute is not None:
                await self.hooks.before_execute(assignment.job_id)
            attributes = {"pool.job_id": assignment.job_id, "pool.machine_id": assignment.machine_id}
            # pool.queue: from the submit (the database's clock) to now, recorded after the fact
            self.metrics.sent(machine_type, assignment.submitted_at)
            tracing.end_span(
                tracing.start_span("pool.queue", assignment.trace, attributes, start_time=assignment.submitted_at)
            )
            span = tracing.start_span("pool.execute", assignment.trace, attributes)
            started = self.clock()
            self._unanswered.pop(assignment.job_id, None)  # sent from here: reconcile must never requeue it
            with tracing.activated(span):  # the worker hop's span, and the machine's work, sit under it
                reply = await self.client.execute(
                    endpoint,
                    token,
                    assignment.payload,
                    deadline_seconds=assignment.timeout_seconds,
                    trace=tracing.current_headers(assignment.trace),
                )
            refused = None
            if reply.kind is ReplyKind.UNREACHABLE:  # no byte went out: the job may go to another machine
                refused = await hand_back_refused(self, assignment, reply, machine_type)
                if refused.handed_back:
                    tracing.end_span(span, f"handed back: {reply.error or 'worker unreachable'}")
                    return
            ended = self.clock()  # idle from here: a reap racing the completion below reads the same instant
            duration = max(0.0, ended - started)
            outcome = (refused and refused.outcome) or decide_job_outcome(
                reply, cancelled=False, timeout_seconds=assignment.timeout_seconds
            )
            tracing.end_span(span, None if outcome.state == JobState.COMPLETED else outcome.error or str(outcome.state))
            if self.hooks.before_complete is not None:
                await self.hooks.before_complete(assignment.job_id)
            current = self.catalogue.get(machine_type)
            keep_feeding = current is not None and current.image == image
            # the next job goes out right after this statement, which is then its conditional send (no
            # mark_sent): only while the lease is trusted for that call, as mark_sent is preceded by the check
            send_next = keep_feeding and self.trusted_for_call()
            # a batch of the key out during the statement may be one it could not see, nor the batch the machine
            # idle: both committed unseen by the other (the batch's answer pokes placement in every other order)
            key = (tenant_id, machine_type, image)
            batches_before = self._batches_sent.get(key, 0), bool(self._batches_out.get(key))
            self._waiters.completing.add(assignment.job_id)
            try:
                completion, retried = await self._durably(
                    f"job {assignment.job_id}: completion",
                    functools.partial(
                        self.repo.jobs.complete,
                        job_id=assignment.job_id,
                        machine_id=assignment.machine_id,
                        state=str(outcome.state),
                        result=outcome.result,
                        error=outcome.error,
                        duration_seconds=duration,
                        owner=self.owner,
                        retire=outcome.retire_machine,
                        take_next=keep_feeding,
                        send_next=send_next,
                        tenant_id=tenant_id,
                        machine_type=machine_type,
                        notified_result_bytes=NOTIFIED_RESULT_BYTES,
                        channel=self.channel,
                    ),
                )
                if completion.job is not None:
                    result = outcome.result if completion.job.has_result else None
                    self._waiters.finish(assignment.job_id, Finished(job=completion.job, result=result))
            finally:
                self._waiters.completing.discard(assignment.job_id)
                self._waiters.wake(assignment.job_id)
            if completion.job_state is not None:
                self.metrics.finished(machine_type, str(completion.job_state), self.clock() - started)
            if completion.job_state is None and retried:
                # an earlier attempt may have landed (result, usage and hand-off written) with its answer lost
                machine_state, held, provider_id = await self._held(assignment.machine_id, driver)
                if machine_state == MachineState.STOPPING:
                    await self._finish_stop(assignment.machine_id, provider_id)
                    return
                if machine_state is not None:
                    log.info("job %s: its completion had landed before the store went away", assignment.job_id)
                    assignment, resumed = held, True
                    continue
            if completion.job_state is None:
                log.warning(
                    "job %s finished on machine %s after this process lost it", assignment.job_id, assignment.machine_id
                )
                return
            if completion.machine_state == MachineState.STOPPING:
                log.info("machine %s retired: %s", assignment.machine_id, outcome.error)
                await self._finish_stop(assignment.machine_id, completion.provider_id)
                return
            if completion.machine_state == MachineState.WARM:
                self._idle_since[assignment.machine_id] = ended
                if batches_before != (self._batches_sent.get(key, 0), False):
                    self._spawn(self._place_after_batches(key), f"pool-place-after-{assignment.machine_id}")
                self._may_take(tenant_id, machine_type, image)  # a batch still gathering goes out: it sees the machine
            assignment, resumed = completion.next_job, retried

    async def _requeue(self, assignment: Assignment, *, marked: bool) -> None:
        await self._durably(
            f"job {assignment.job_id}: requeue",
            lambda: self.repo.jobs.requeue_unsent(assignment.job_id, assignment.machine_id, self.owner, marked=marked),
        )

    # placement and boot

    def _poke_placement(self) -> None:
        if self._closing:
            return
        if self._placing.locked():
            self._place_again = True
            return
        self._spawn(self.place(), "pool-place")

    async def place(self) -> None:
        """Hand queued work to idle warm machines, then start machines for what is left (serialized).

        Hitting the fleet cap logs one warning per call, however often the pass places again: a capped
        fleet looks exactly like a slow queue from the outside, but a log line per submit would drown it."""
        if self.hooks.before_place is not None:
            await self.hooks.before_place()
        held: int | None = None
        async with self._placing:
            self._place_again = True
            while self._place_again:
                self._place_again = False
                await self._drain_warm()
                starts, capped = await self._plan_and_insert()
                held = capped if capped is not None else held
                for start in starts:
                    self._spawn(self._booting(*start), f"pool-boot-{start[0]}")
        if held is not None:
            log.warning(
                "fleet cap of %s machines reached: %d queued job(s) wait for capacity", self.max_workers_total, held
            )

    async def _drain_warm(self) -> None:
        async with borrow(self.repo.pool) as c:
            demand = await self.repo.machines.demand(c)
        if not demand:
            return
        wanted = {(d.tenant_id, d.machine_type) for d in demand}
        for fleet_machine in await self.repo.machines.fleet():
            machine = fleet_machine.machine
            if machine.state is not MachineState.WARM or (machine.tenant_id, machine.machine_type) not in wanted:
                continue
            if is_stale(machine, self.catalogue) or machine.id in self._driving:
                continue
            driver = object()
            assignment = await self._take_next(machine.id, machine.image, driver)
            if assignment is not None:
                self._spawn(
                    self._run(assignment, machine.tenant_id, machine.machine_type, machine.image, driver=driver),
                    f"pool-run-{assignment.job_id}",
                )

    async def _plan_and_insert(self) -> tuple[list[_Start], int | None]:
        """One transaction under the placement lock: count the queue and the fleet, insert the starts.
        Also the queued jobs the fleet cap holds back (None: the cap was not hit)."""
        starts: list[_Start] = []
        held: int | None = None
        async with borrow(self.repo.pool) as c, c.transaction():
            await self.repo.machines.lock_placement(c)
            demand = await self.repo.machines.demand(c)
            if not demand:
                return [], None
            fleet = await self.repo.machines.fleet(c)
            plan = plan_placement(
                demand=[
                    Demand(tenant_id=d.tenant_id, machine_type=d.machine_type, queued=d.queued, head=d.head)
                    for d in demand
                ],
                machines=[_as_seen(m.machine, m.job_id) for m in fleet],
                catalogue=self.catalogue,
                max_workers_total=self.max_workers_total,
            )
            if plan.fleet_cap_hit:
                held = sum(d.count for d in plan.deferred if d.reason == "fleet_cap")
            if self.hooks.before_insert_machines is not None:
                await self.hooks.before_insert_machines()
            for start in plan.starts:
                machine_type = self.catalogue.get(start.machine_type)
                if machine_type is None:
                    continue
                machine_id, token = str(uuid.uuid4()), secrets.token_urlsafe(32)
                job_id, trace = await self.repo.machines.insert_machine(
                    c,
                    machine_id=machine_id,
                    tenant_id=start.tenant_id,
                    machine_type=machine_type.name,
                    image=machine_type.image,
                    backend=str(machine_type.backend),
                    token=token,
                    owner=self.owner,
                    cool_down_seconds=machine_type.cool_down_seconds,
                    assign_job=True,
                )
                starts.append((machine_id, start.tenant_id, machine_type, token, job_id, trace))
        return starts, held

    async def hint(self, tenant_id: str, machine_type: str) -> HintDecision | SubmitError:
        """Start one machine for the tenant unless one is warm or starting, within both caps."""
        if self.catalogue.get(machine_type) is None:
            await self.type_named(machine_type)
        machine_id, token = str(uuid.uuid4()), secrets.token_urlsafe(32)
        # driven from before its insert is sent: a scaler pass reading the row while the commit's answer is on
        # its way leaves it to the boot below; a commit whose answer is lost leaves it to the pass (boot_unbooted)
        reserved = object()
        self._driving[machine_id] = reserved
        try:
            async with borrow(self.repo.pool) as c, c.transaction():
                await self.repo.machines.lock_placement(c)
                fleet = await self.repo.machines.fleet(c)
                decision = decide_hint(
                    tenant_id=tenant_id,
                    machine_type=machine_type,
                    machines=[_as_seen(m.machine, m.job_id) for m in fleet],
                    catalogue=self.catalogue,
                    max_workers_total=self.max_workers_total,
                )
                if not isinstance(decision, HintDecision) or not decision.started:
                    return decision
                kind = self.catalogue.get(machine_type)
                assert kind is not None  # decide_hint refused unknown types
                await self.repo.machines.insert_machine(
                    c,
                    machine_id=machine_id,
                    tenant_id=tenant_id,
                    machine_type=kind.name,
                    image=kind.image,
                    backend=str(kind.backend),
                    token=token,
                    owner=self.owner,
                    cool_down_seconds=kind.cool_down_seconds,
                    assign_job=False,
                )
            self._spawn(self._booting(machine_id, tenant_id, kind, token, None, {}), f"pool-boot-{machine_id}")
        finally:
            self._release(machine_id, reserved)  # the boot registered its own driver in its place, if it started
        return decision

    def _booting(
        self,
        machine_id: str,
        tenant_id: str,
        machine_type: MachineType,
        token: str,
        job_id: str | None,
        trace: Mapping[str, str],
    ) -> Coroutine[Any, Any, None]:
        """The boot of a machine placement just inserted, registered as its driver before the boot starts."""
        driver = object()
        self._driving[machine_id] = driver
        return self._boot(machine_id, tenant_id, machine_type, token, job_id, trace, driver)

    async def _boot(
        self,
        machine_id: str,
        tenant_id: str,
        machine_type: MachineType,
        token: str,
        job_id: str | None,
        trace: Mapping[str, str],
        driver: object,
    ) -> None:
        """Start the machine, record where it is, poll its health, then hand it its job (traced as pool.boot
        under that job's caller)."""
        try:
            await self._boot_driven(machine_id, tenant_id, machine_type, token, job_id, trace, driver)
        except Exception:
            self._boot_died.add(machine_id)  # perhaps after the provider's create: boot_unbooted releases it
            raise
        finally:
            self._release(machine_id, driver)

    async def _boot_driven(
        self,
        machine_id: str,
        tenant_id: str,
        machine_type: MachineType,
        token: str,
        job_id: str | None,
        trace: Mapping[str, str],
        driver: object,
    ) -> None:
        span = tracing.start_span(
            "pool.boot", trace, {"pool.machine_id": machine_id, "pool.machine_type": machine_type.name}
        )
        try:
            with tracing.activated(span):  # the provider's calls and the health polls sit under the boot
                handle = await self._start_and_poll(machine_id, tenant_id, machine_type, token)
        except _BootFailed as failed:
            tracing.end_span(span, failed.reason)
            return
        except BaseException:  # cancelled mid-boot (shutdown)
            tracing.end_span(span, "the boot was interrupted")
            raise
        tracing.end_span(span)
        await self._ready(machine_id, tenant_id, machine_type, token, handle, job_id, driver)

    async def _start_and_poll(
        self, machine_id: str, tenant_id: str, machine_type: MachineType, token: str
    ) -> MachineHandle:
        """Start the machine and poll its health until it answers; _BootFailed with the reason otherwise."""
        kind = str(machine_type.backend)
        if not self.trusted_for_call():
            reason = "not started: the instance lease is not trusted for the call"
            await self._boot_failed(machine_id, None, reason, kind)
            raise _BootFailed(reason)
        spec = MachineSpec(machine_id=machine_id, tenant_id=tenant_id, machine_type=machine_type, worker_token=token)
        try:
            backend = self._backend(kind)
            handle = await backend.start(spec)
        except BackendError as error:
            await self._boot_failed(machine_id, None, f"start failed: {error}", kind)
            raise _BootFailed(f"start failed: {error}") from None
        if self.hooks.before_record_started is not None:
            await self.hooks.before_record_started(machine_id)
        recorded, _ = await self._durably(  # idempotent: the same values again while the machine is starting
            f"machine {machine_id}: record_started",
            lambda: self.repo.machines.record_started(
                machine_id,
                provider_id=handle.provider_id,
                endpoint=handle.endpoint,
                region=handle.region,
                owner=self.owner,
            ),
        )
        if not recorded:
            log.warning("machine %s could not be recorded (reclaimed or cancelled): stopping it", machine_id)
            await self._stop_quietly(handle.provider_id, kind)
            raise _BootFailed("the machine's row could not be recorded")
        booted_at = self.clock()
        while not await backend.health(handle):
            if self.clock() - booted_at >= machine_type.boot_timeout_seconds:
                reason = f"no health answer within {machine_type.boot_timeout_seconds:g} s"
                await self._boot_failed(machine_id, handle.provider_id, reason, kind)
                raise _BootFailed(reason)
            await self.sleep(self.health_poll_seconds)
        return handle

    async def _ready(
        self,
        machine_id: str,
        tenant_id: str,
        machine_type: MachineType,
        token: str,
        handle: MachineHandle,
        job_id: str | None,
        driver: object,
    ) -> None:
        """The machine answered: warm, or busy with its dispatched job, which is sent at once."""
        if self.hooks.before_machine_ready is not None:
            await self.hooks.before_machine_ready(machine_id)
        (state, assignment), retried = await self._durably(
            f"machine {machine_id}: ready", lambda: self.repo.machines.machine_ready(machine_id, self.owner)
        )
        if state is None and retried:  # an earlier attempt may have landed: read the machine back
            state, assignment, _ = await self._held(machine_id, driver)
            if assignment is not None and assignment.job_id != job_id:
                assignment = None  # not the job placement gave this boot
        if state is None:
            log.warning("machine %s booted after this process lost it: stopping it", machine_id)
            await self._stop_quietly(handle.provider_id, str(machine_type.backend))
            return
        self._idle_since[machine_id] = self.clock()
        log.info("machine %s (%s, tenant %s) answered its health check", machine_id, machine_type.name, tenant_id)
        if assignment is not None:
            await self._run(
                Assignment(
                    job_id=assignment.job_id,
                    machine_id=machine_id,
                    payload=assignment.payload,
                    timeout_seconds=assignment.timeout_seconds,
                    trace=assignment.trace,
                    submitted_at=assignment.submitted_at,
                    endpoint=handle.endpoint,
                    token=token,
                    sent=assignment.sent,
                ),
                tenant_id,
                machine_type.name,
                machine_type.image,
                driver=driver,
            )
        else:
            self._may_take(tenant_id, machine_type.name, machine_type.image)
            self._poke_placement()  # queued work of the tenant may be waiting for exactly this machine

    async def _boot_failed(self, machine_id: str, provider_id: str | None, reason: str, kind: str) -> None:
        log.warning("machine %s failed to boot: %s", machine_id, reason)
        self._outlook.clear()  # a slot under a tenant cap is free: placement may act on the next submit
        if provider_id is not None:
            await self._stop_quietly(provider_id, kind)
        failed, _ = await self._durably(
            f"machine {machine_id}: boot_failed",
            lambda: self.repo.machines.boot_failed(
                machine_id, self.owner, f"machine {machine_id} failed to boot: {reason}"
            ),
        )
        for job_id, state in failed.items():
            if state == JobState.FAILED:
                self._waiters.wake(job_id)
                log.info("job %s failed: its machine type was removed while the machine booted", job_id)
            else:
                log.info("job %s waits for capacity again", job_id)

    # stopping

    async def _stop_machine(
        self, machine_id: str, provider_id: str | None, *, reason: str, states: tuple[str, ...] = ("warm",)
    ) -> bool:
        retired, recorded_provider = await self.repo.machines.retire(
            machine_id, self.owner, reason=reason, states=states
        )
        if not retired:
            return False
        await self._finish_stop(machine_id, recorded_provider or provider_id)
        return True

    async def _finish_stop(self, machine_id: str, provider_id: str | None) -> None:
        """Stop at the provider, then forget the row; a failed stop keeps it (counted) for the next pass."""
        self._idle_since.pop(machine_id, None)
        self._outlook.clear()  # a slot under a tenant cap is free: placement may act on the next submit
        if provider_id is not None:
            if not self.trusted_for_call():
                log.warning(
                    "machine %s: not stopped now (the instance lease is not trusted); the next pass retries it",
                    machine_id,
                )
                return
            if self.hooks.before_provider_stop is not None:
                await self.hooks.before_provider_stop(machine_id)
            try:
                await self._backend(await self.repo.machines.machine_backend(machine_id) or BackendKind.LOCAL).stop(
                    provider_id
                )
            except (BackendError, OSError) as error:
                log.warning("machine %s: stop failed (%s); the next pass retries it", machine_id, error)
                return
        await self.repo.machines.forget_machine(machine_id, self.owner)

    async def _stop_quietly(self, provider_id: str, kind: str) -> None:
        try:
            await self._backend(kind).stop(provider_id)
        except (BackendError, OSError) as error:
            log.error("provider machine %s: stop failed: %s", provider_id, error)

    # cancel

    async def cancel(self, job_id: str, tenant_id: str, build_id: str) -> CancelOutcome | None:
        """Cancel at once; a running job's machine gets the build cancel with its token. None: not found."""
        cancelled = await self.repo.jobs.cancel(job_id, tenant_id, build_id)
        self._waiters.wake(job_id)
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
        job = await self.repo.get_job(job_id, tenant_id)
        if job is None:
            return None
        if cancelled is not None:
            return CancelOutcome(job=job, status_code=200)
        return CancelOutcome(job=job, status_code=decide_cancel(JobState(job.state)).status_code)

    # scaler

    async def _scaler_loop(self) -> None:
        while True:
            await self.sleep(self.scaler_seconds)
            try:
                await self.scaler_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scaler pass failed; the next one retries")

    async def scaler_pass(self) -> None:
        """Reclaim lapsed instances, apply the catalogue, place, reap, probe, retry failed stops."""
        await self._keep_lease()
        await self._listen()
        await self.reclaim()
        await self.reconcile()
        await self.refresh_catalogue()
        await self.boot_unbooted()
        await self.place()
        await self.reap()
        await self.probe()
        for machine_id, provider_id in await self.repo.machines.stopping(self.owner):
            await self._finish_stop(machine_id, provider_id)

    async def _keep_lease(self) -> None:
        if self._keeper.is_trusted():
            return
        lease = await self._keeper.campaign(retry_interval=min(1.0, self.lease_seconds / 3))
        if lease.term != self.owner.term:
            log.error(
                "instance %s lost its lease (term %d → %d): its rows were reclaimed",
                self.instance_id,
                self.owner.term,
                lease.term,
            )
        self._owner = Owner(self.instance_id, lease.term)

    async def reclaim(self) -> None:
        for lapsed in await self.repo.ownership.lapsed_owners(self.owner):
            jobs, machines = await self.repo.ownership.reclaim(lapsed, self.owner)
            self.metrics.takeover(lease_name(lapsed.instance))
            log.warning(
                "reclaimed instance %s (term %d): %d in-flight job(s) failed, %d machine(s) to stop",
                lapsed.instance,
                lapsed.term,
                jobs,
                machines,
            )

    async def reconcile(self) -> None:
        """Requeue the unsent jobs on this process's busy machines that no task of it drives: a claim whose
        answer was lost (a submit's, when the store went away as it landed) would otherwise hold the machine
        under this live owner, which no reclaim touches. Dispatched means never sent; running means never sent
        only for a submit that did not answer (its sender never started), so only those are requeued running. Any
        other running job no task drives (its sender ended on an unexpected error) fails, and its machine retires."""
        own = [r for r in await self.repo.machines.own_machines(self.owner) if r.machine.state is MachineState.BUSY]
        await asyncio.gather(*(event.wait() for event in list(self._submitting)))  # claims the read may have seen
        for row in own:
            if row.job_id is None or row.machine.id in self._driving:
                continue
            unanswered = row.job_id in self._unanswered
            driver = object()  # held while requeueing, so no step resumes the job on the machine meanwhile
            self._driving[row.machine.id] = driver
            try:
                requeued = await self.repo.jobs.requeue_unsent(
                    row.job_id, row.machine.id, self.owner, marked=unanswered
                )
            finally:
                self._release(row.machine.id, driver)
            self._unanswered.pop(row.job_id, None)
            if requeued:
                log.warning("job %s: its claim of machine %s had no sender; requeued", row.job_id, row.machine.id)
                self._poke_placement()
                continue
            # running with no sender here that may be requeued: nobody will report it, and the machine would stay
            # busy (billed, holding a cap slot) until this process's rows are reclaimed
            failed, retired, provider_id = await self.repo.jobs.abandon_running(
                row.job_id, row.machine.id, self.owner, ABANDONED
            )
            if failed:
                log.warning("job %s on machine %s: %s; failed, machine retired", row.job_id, row.machine.id, ABANDONED)
                self._waiters.wake(row.job_id)
            if retired:
                self._spawn(self._finish_stop(row.machine.id, provider_id), f"pool-stop-{row.machine.id}")

    async def boot_unbooted(self) -> None:
        """Boot this process's starting machines that no task drives and no provider started: a placement
        (or hint) whose commit landed with its answer lost started no boot, and its row would hold its job and
        a cap slot under this live owner, which no reclaim touches. Booted on the normal path rather than
        released (thermostat.policy.pool.unbooted says why); a stale one is released, its job requeued.

        Read under the placement lock: a placement whose commit is in flight registers its boots right after
        its answer, before it lets go, so none of its rows is mistaken for a lost one. A hint registers its
        machine as driven before its insert is sent, so it needs no lock here."""
        try:
            async with self._placing:
                rows = {row.machine.id: row for row in await self.repo.machines.starting_machines(self.owner)}
                actions = plan_unbooted(
                    machines=[PlacedMachine(machine=r.machine, started=r.started) for r in rows.values()],
                    driven=self._driving.keys(),
                    catalogue=self.catalogue,
                    boot_began=self._boot_died,
                )
                self._boot_died.intersection_update(rows)  # the others' rows are gone or moved on
                for action in actions:
                    row = rows[action.machine_id]
                    machine_type = self.catalogue.get(row.machine.machine_type)
                    if action.recovery is Recovery.BOOT and machine_type is not None:
                        log.warning("machine %s: booting it (%s)", row.machine.id, action.reason)
                        boot = self._booting(
                            row.machine.id, row.machine.tenant_id, machine_type, row.token, row.job_id, row.trace
                        )
                        self._spawn(boot, f"pool-boot-{row.machine.id}")
                        continue
                    log.warning("machine %s: released unbooted (%s)", row.machine.id, action.reason)
                    driver = object()  # held while releasing, as a boot would be
                    self._driving[row.machine.id] = driver
                    try:
                        await self._boot_failed(row.machine.id, None, action.reason, row.backend)
                    finally:
                        self._release(row.machine.id, driver)
                    self._poke_placement()  # its job waits in the queue again
        finally:
            if self._place_again:  # a placement asked for while this held the lock (even if it failed): it runs now
                self._poke_placement()

    async def reap(self) -> None:
        """Stop this process's machines idle past their type's cool-down (monotonic: immune to clock steps)."""
        now = self.clock()
        own = await self.repo.machines.own_machines(self.owner)
        seen = []
        for row in own:
            machine = row.machine
            if machine.state is MachineState.WARM:
                idle = self._idle_since.setdefault(machine.id, now)
                seen.append(_with_idle(machine, idle))
        for retirement in plan_reaping(machines=seen, catalogue=self.catalogue, now=now):
            provider = next((r.provider_id for r in own if r.machine.id == retirement.machine_id), None)
            if await self._stop_machine(retirement.machine_id, provider, reason=str(retirement.reason)):
                log.info("machine %s retired: %s", retirement.machine_id, retirement.reason)

    async def probe(self) -> None:
        """Probe this process's warm machines at once; N misses retire, a pass where all fail is ours."""
        own = [r for r in await self.repo.machines.own_machines(self.owner) if r.machine.state is MachineState.WARM]
        probed = machines_to_probe([r.machine for r in own], self.catalogue)
        if not probed:
            return
        by_id = {r.machine.id: r for r in own}

        async def one(machine: Machine) -> bool:
            row = by_id[machine.id]
            if row.provider_id is None or row.endpoint is None or row.backend not in self.backends:
                return False
            return await self._backend(row.backend).health(
                MachineHandle(provider_id=row.provider_id, endpoint=row.endpoint, region=row.region)
            )

        answers = await asyncio.gather(*(one(m) for m in probed))
        verdict = judge_health(
            machines=probed, probes={m.id: ok for m, ok in zip(probed, answers, strict=True)}, catalogue=self.catalogue
        )
        if verdict.local_fault:
            log.warning("every probed machine missed its health check: treated as this process's network")
        # only counts that changed: a pass over a healthy fleet writes nothing (bench/pool_scaler.py)
        changed = {m: n for m, n in verdict.misses.items() if n != by_id[m].machine.health_misses}
        await self.repo.machines.record_misses(changed, self.owner)

        async def retire(machine_id: str) -> None:
            if await self._stop_machine(machine_id, by_id[machine_id].provider_id, reason="health checks missed"):
                log.warning("machine %s retired: stopped answering health checks", machine_id)

        await asyncio.gather(*(retire(machine_id) for machine_id in verdict.retire))

    async def _recover_machines(self) -> None:
        """After a restart under the same id: keep the warm machines that answer, stop the rest."""
        for row in await self.repo.machines.own_machines(self.owner):
            healthy = False
            if (
                row.machine.state is MachineState.WARM
                and row.provider_id
                and row.endpoint
                and row.backend in self.backends
            ):
                healthy = await self._backend(row.backend).health(
                    MachineHandle(provider_id=row.provider_id, endpoint=row.endpoint, region=row.region)
                )
            if healthy:
                self._idle_since[row.machine.id] = self.clock()
            else:
                await self._stop_machine(
                    row.machine.id, row.provider_id, reason="not found after restart", states=("warm", "stopping")
                )


class _BootFailed(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_Start = tuple[str, str, MachineType, str, str | None, dict[str, str]]
"""A machine row placement inserted: id, tenant, type, token, its job (if any) and that job's trace."""


def _as_seen(machine: Machine, job_id: str | None) -> Machine:
    """A starting machine that already holds a job is busy as far as placement is concerned."""
    if machine.state is MachineState.STARTING and job_id is not None:
        return Machine(
            id=machine.id,
            tenant_id=machine.tenant_id,
            machine_type=machine.machine_type,
            image=machine.image,
            state=MachineState.BUSY,
            last_session_id=machine.last_session_id,
            health_misses=machine.health_misses,
            cool_down_seconds=machine.cool_down_seconds,
        )
    return machine


def _with_idle(machine: Machine, idle_since: float) -> Machine:
    return Machine(
        id=machine.id,
        tenant_id=machine.tenant_id,
        machine_type=machine.machine_type,
        image=machine.image,
        state=machine.state,
        idle_since=idle_since,
        last_session_id=machine.last_session_id,
        health_misses=machine.health_misses,
        cool_down_seconds=machine.cool_down_seconds,
    )
