"""One wake per pod at a time — within a replica and across replicas — and every caller gets its result.

Two overlapping wakes (a retry after Cloudflare's 524, a double tap, two replicas behind a load balancer)
would both read "no pod" and both POST /v2/pods. So:

- In a replica, a wake runs as a task detached from the request that asked for it: a caller that
  disconnects never aborts a half-done start or create, and a caller arriving meanwhile awaits the same task
  (the pod-control seed's singleton gate; the joiner touches RunPod not at all).
- Across replicas, the task first takes the pod's wake lease (`wake:<pod>`, expiry by the database clock)
  and writes the Requested row before RunPod is touched. A replica that cannot take the lease joins the
  in-flight row: it waits for its completion and returns the result stored with it. A row whose holder's
  lease lapsed (the replica died mid-wake) is closed as abandoned and the next caller runs a new wake.

Both are the store's generic single-flight (store/shared_flight.py, `SharedFlight[WakeResult]`) over the pod's
wake rows, whose result the repository stores through a codec; this module adds what is particular to a wake:
its Requested row, its fence and its completion.

Without the store there is no cross-replica gate, and a wake without it could bill twice: the gate then
refuses (fail closed) instead of running unguarded.

Stops and wakes of a pod are ordered by when they were issued (policy/stop_order.py): the Requested row is
stamped under the pod's order lock, as every stop is before RunPod is asked. Before it observes anything the
wake lets a stop still in flight settle, so a wake asked for just after a stop (or as the idle stop fires)
sees the stopped pod and starts it. Before every billable call the wake asks its fence: the lease must be
trusted for longer than the call may take (a create still on the wire must not outlive the lease), and no
stop issued since the wake was requested may have been accepted — an operator's stop during a wake is not
undone by a start or a replacement.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from datetime import datetime

from thermostat.chassis.clock import SYSTEM_CLOCK, Clock
from thermostat.policy.wake.stop_order import StopVerdict, judge_stops
from thermostat.policy.wake.wake_result import WakeResult
from thermostat.store.connections import STORE_ERRORS
from thermostat.store.keeper import LeaseKeeper
from thermostat.store.lease import LeaseStore
from thermostat.store.shared_flight import SharedFlight

from .repository import PodRepository, WakeCompletion
from .wake_fence import Fence, Halt

log = logging.getLogger("thermostat.pod_controller.wake_gate")

RunWake = Callable[[uuid.UUID, Fence, bool], Awaitable[tuple[WakeResult, WakeCompletion]]]
"""One wake: its attempt id, its fence, and whether it closed a wake a stopped replica abandoned (which may have
issued a billable call it never recorded: policy/wake/adoption.py)."""
"""Runs one wake for an attempt id, asking the fence before every billable call; returns (the callers'
result, what the history keeps of it)."""

INTERRUPTED = WakeCompletion(
    outcome="Failed",
    wake_outcome="Exception",
    reason="interrupted by shutdown before the wake completed; check the pod's billable actions",
)


class WakeGateUnavailable(Exception):
    """The store could not be reached, so no wake may run."""


class WakeGate:
    def __init__(
        self,
        repository: PodRepository,
        leases: LeaseStore,
        *,
        replica: str,
        lease_seconds: float = 60.0,
        poll_seconds: float = 0.1,
        call_budget: float = 20.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.repository = repository
        self.lease_seconds = lease_seconds
        # A billable call is issued only while the lease is trusted for longer than the call may take, so a
        # create still on the wire can never outlive the lease (another replica's create would stack a pod).
        self.call_budget = call_budget
        self.poll_seconds = poll_seconds
        self.record_timeout = repository.timeout
        self.clock = clock
        # How long a stop can be in flight: its RunPod call, its action record and its settlement. A stop
        # still open past it lost its replica, and is waited for no longer.
        self.stop_settle_seconds = call_budget + 3 * self.record_timeout
        self._flights: SharedFlight[WakeResult] = SharedFlight(
            repository,
            leases,
            name="wake",
            replica=replica,
            lease_seconds=lease_seconds,
            poll_seconds=poll_seconds,
            release_timeout=self.record_timeout,
            clock=clock,
        )

    async def run(self, pod_name: str, wake: RunWake, *, trigger: str = "wake") -> WakeResult:
        """Run or join the pod's wake. Cancelling the caller does not cancel the wake.

        `pod_name` is the configured name: its rows are written under it, as every other record of the pod
        is (history and lastWake read them by it); the lease and the in-process join fold its case. `trigger` is
        recorded on the wake's row when this call begins the wake (a joiner's is not: the wake is the one that began
        it).
        """
        try:
            return await self._flights.run(
                pod_name.casefold(), pod_name, lambda keeper: self._lead(pod_name, keeper, wake, trigger)
            )
        except STORE_ERRORS as error:
            raise WakeGateUnavailable(
                f"store unreachable ({type(error).__name__}); no wake was started here"
            ) from error

    async def drain(self, seconds: float) -> None:
        """Let running wakes finish (on shutdown); past `seconds`, interrupt them — each records its outcome
        within the record timeout (and releases its lease after it), and the drain waits no longer."""
        await self._flights.drain(seconds, interrupted_within=self.record_timeout)

    async def _stops(self, pod_name: str, requested_at: datetime) -> Halt | None:
        """Wait while a stop of the pod is in flight; then a Halt if one issued since `requested_at` stopped it."""
        while True:
            try:
                around = await self.repository.stops_around(pod_name, requested_at, self.stop_settle_seconds)
            except STORE_ERRORS as error:
                # the stop log is best-effort: without it no stop is known; a store that is gone altogether
                # also stops renewing the lease, and the fence's trust check halts the wake
                log.warning("pod %s: stops around the wake unreadable (%s)", pod_name, type(error).__name__)
                return None
            if around is None:
                return None
            decision = judge_stops(
                requested_at=requested_at, now=around.now, settle_seconds=self.stop_settle_seconds, stops=around.stops
            )
            match decision.verdict:
                case StopVerdict.PROCEED:
                    return None
                case StopVerdict.HALT:
                    return Halt(in_flight=False, reason=decision.reason)
                case StopVerdict.WAIT:
                    log.info("pod %s: %s; the wake waits for it to settle", pod_name, decision.reason)
                    await self.clock.sleep(self.poll_seconds)

    def _fence(self, pod_name: str, keeper: LeaseKeeper, requested_at: datetime) -> Fence:
        async def fence() -> Halt | None:
            # stops first: waiting on one in flight takes time, and the lease is judged after it
            halt = await self._stops(pod_name, requested_at)
            if halt is not None:
                return halt
            # the keeper's trust, read on the clock it stamped the lease with
            if keeper.lease is None or keeper.remaining_trust() < self.call_budget:
                return Halt(
                    in_flight=True,
                    reason="the wake lease is no longer trusted here; another replica may carry the wake",
                )
            return None

        return fence

    async def _lead(self, pod_name: str, keeper: LeaseKeeper, wake: RunWake, trigger: str) -> WakeResult:
        repository = self.repository
        attempt = uuid.uuid4()
        requested_at: datetime | None = None
        abandoned: list[uuid.UUID] = []
        try:
            abandoned = await repository.abandon_wakes(pod_name)
            for stopped in abandoned:
                log.warning("pod %s: wake %s abandoned by a replica that stopped; starting anew", pod_name, stopped)
            requested_at = await repository.insert_wake(attempt, pod_name, keeper.holder, trigger)
        except Exception as error:
            # we hold the lease, so the wake is still gated; only its history entry is missing
            log.warning("pod %s: wake %s requested, history not written (%s)", pod_name, attempt, type(error).__name__)
        if requested_at is None:
            requested_at = await repository.db_now()
        fence = self._fence(pod_name, keeper, requested_at)
        try:
            # a stop issued before this wake is let land first: the wake then sees the stopped pod and starts it
            # (a stop issued since halts it, as it halts any billable call below)
            halted = await self._stops(pod_name, requested_at)
            result, completion = await wake(attempt, _closed(halted) if halted is not None else fence, bool(abandoned))
        except asyncio.CancelledError:
            # shutdown past its grace: the outcome is still recorded (#2541), then the cancellation goes on
            await self._complete(pod_name, attempt, INTERRUPTED, None)
            raise
        await self._complete(pod_name, attempt, completion, result)
        return result

    async def _complete(
        self, pod_name: str, attempt: uuid.UUID, completion: WakeCompletion, result: WakeResult | None
    ) -> None:
        try:
            problem = (
                None if await self.repository.complete_wake(attempt, completion, result) else "no open Requested row"
            )
        except Exception as error:
            problem = type(error).__name__
        if problem is not None:
            # A write the store refused leaves the whole entry in the log at ERROR, a level nothing filters
            # (#2541: the cause of four failed wakes had rotated out of the logs).
            entry = {"attempt_id": str(attempt), "pod_name": pod_name, **asdict(completion)}
            log.error(
                "pod %s: wake %s completed, history NOT persisted (%s): %s",
                pod_name,
                attempt,
                problem,
                json.dumps(entry, default=str),
            )


def _closed(halt: Halt) -> Fence:
    async def fence() -> Halt | None:
        return halt

    return fence
