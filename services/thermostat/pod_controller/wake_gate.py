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
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import asyncpg

from thermostat.policy.wake.stop_order import StopEntry, StopVerdict, judge_stops
from thermostat.store.db import Store
from thermostat.store.keeper import LeaseKeeper

from .records import Q
from .wake_service import Fence, Halt

log = logging.getLogger("thermostat.pod_controller.wake_gate")

Payload = dict[str, Any]
RunWake = Callable[[uuid.UUID, Fence], Awaitable[tuple[Payload, Payload]]]
"""Runs one wake for an attempt id, asking the fence before every billable call; returns (the caller-facing
result, the history row's completion fields)."""

_STORE_ERRORS = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


class WakeGateUnavailable(Exception):
    """The store could not be reached, so no wake may run."""


class WakeGate:
    def __init__(self, store: Store, *, replica: str, lease_seconds: float = 60.0, poll_seconds: float = 0.1,
                 record_timeout: float = 10.0, call_budget: float = 20.0) -> None:
        self.store = store
        self.replica = replica
        self.lease_seconds = lease_seconds
        # A billable call is issued only while the lease is trusted for longer than the call may take, so a
        # create still on the wire can never outlive the lease (another replica's create would stack a pod).
        self.call_budget = call_budget
        self.poll_seconds = poll_seconds
        self.record_timeout = record_timeout
        # How long a stop can be in flight: its RunPod call, its action record and its settlement. A stop
        # still open past it lost its replica, and is waited for no longer.
        self.stop_settle_seconds = call_budget + 3 * record_timeout
        self._tasks: dict[str, asyncio.Task[Payload]] = {}

    async def run(self, pod_name: str, wake: RunWake) -> Payload:
        """Run or join the pod's wake. Cancelling the caller does not cancel the wake.

        `pod_name` is the configured name: its rows are written under it, as every other record of the pod
        is (history and lastWake read them by it); the lease and the in-process join fold its case.
        """
        key = pod_name.casefold()
        task = self._tasks.get(key)
        if task is None or task.done():
            task = asyncio.create_task(self._run_or_join(key, pod_name, wake), name=f"wake:{key}")
            self._tasks[key] = task

            def forget(done: asyncio.Task[Payload], key: str = key) -> None:
                if self._tasks.get(key) is done:
                    del self._tasks[key]

            task.add_done_callback(forget)
        return await asyncio.shield(task)

    async def drain(self, seconds: float) -> None:
        """Let running wakes finish (on shutdown); past `seconds`, interrupt them — each records its outcome."""
        pending = [t for t in self._tasks.values() if not t.done()]
        if not pending:
            return
        log.info("waiting up to %.0fs for %d wake(s) in flight", seconds, len(pending))
        _, still = await asyncio.wait(pending, timeout=seconds)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=self.record_timeout)

    async def _run_or_join(self, key: str, pod_name: str, wake: RunWake) -> Payload:
        try:
            arrival: datetime = await self.store.pool.fetchval(Q["db_now"])
            while True:
                keeper = LeaseKeeper(self.store.leases, name=f"wake:{key}",
                                     holder=f"{self.replica}:{uuid.uuid4()}", ttl=self.lease_seconds)
                if await keeper.acquire() is not None:
                    try:
                        # a wake that ran entirely after this caller asked answers it too
                        done = await self._completed_since(pod_name, arrival)
                        return done if done is not None else await self._lead(pod_name, keeper, wake)
                    finally:
                        with contextlib.suppress(Exception):
                            await keeper.release()
                joined = await self._join(key, pod_name, arrival)
                if joined is not None:
                    return joined
        except _STORE_ERRORS as error:
            raise WakeGateUnavailable(f"store unreachable ({type(error).__name__}); no wake was started here") \
                from error

    async def _completed_since(self, pod_name: str, arrival: datetime) -> Payload | None:
        try:
            done = await self.store.pool.fetchrow(Q["wake_completed_since"], pod_name, arrival)
        except asyncpg.PostgresError as error:
            # the history is best-effort; the lease alone still gates the wake
            log.warning("pod %s: wake history unreadable (%s)", pod_name, type(error).__name__)
            return None
        return dict(json.loads(done["result"])) if done is not None and done["result"] is not None else None

    async def _stops(self, pod_name: str, requested_at: datetime) -> Halt | None:
        """Wait while a stop of the pod is in flight; then a Halt if one issued since `requested_at` stopped it."""
        while True:
            try:
                rows = await asyncio.wait_for(self.store.pool.fetch(
                    Q["stops_around_wake"], pod_name, requested_at, self.stop_settle_seconds), self.record_timeout)
            except _STORE_ERRORS as error:
                # the stop log is best-effort: without it no stop is known; a store that is gone altogether
                # also stops renewing the lease, and the fence's trust check halts the wake
                log.warning("pod %s: stops around the wake unreadable (%s)", pod_name, type(error).__name__)
                return None
            if not rows:
                return None
            decision = judge_stops(
                requested_at=requested_at, now=rows[0]["now"], settle_seconds=self.stop_settle_seconds,
                stops=[StopEntry(issued_at=r["issued_at"], trigger=r["trigger"], settled=r["settled"],
                                 accepted_pod_ids=tuple(r["accepted_pod_ids"])) for r in rows])
            match decision.verdict:
                case StopVerdict.PROCEED:
                    return None
                case StopVerdict.HALT:
                    return Halt(in_flight=False, reason=decision.reason)
                case StopVerdict.WAIT:
                    log.info("pod %s: %s; the wake waits for it to settle", pod_name, decision.reason)
                    await asyncio.sleep(self.poll_seconds)

    def _fence(self, pod_name: str, keeper: LeaseKeeper, requested_at: datetime) -> Fence:
        async def fence() -> Halt | None:
            # stops first: waiting on one in flight takes time, and the lease is judged after it
            halt = await self._stops(pod_name, requested_at)
            if halt is not None:
                return halt
            lease = keeper.lease
            if lease is None or lease.remaining_trust() < self.call_budget:
                return Halt(in_flight=True, reason="the wake lease is no longer trusted here; another replica "
                                                   "may carry the wake")
            return None

        return fence

    async def _lead(self, pod_name: str, keeper: LeaseKeeper, wake: RunWake) -> Payload:
        pool = self.store.pool
        attempt = uuid.uuid4()
        requested_at: datetime | None = None
        try:
            abandoned = await pool.fetch(Q["abandon_wakes"], pod_name)
            for row in abandoned:
                log.warning("pod %s: wake %s abandoned by a replica that stopped; starting anew", pod_name,
                            row["attempt_id"])
            requested_at = await asyncio.wait_for(self._insert_wake(attempt, pod_name, keeper.holder),
                                                  self.record_timeout)
        except Exception as error:
            # we hold the lease, so the wake is still gated; only its history entry is missing
            log.warning("pod %s: wake %s requested, history not written (%s)", pod_name, attempt,
                        type(error).__name__)
        if requested_at is None:
            requested_at = await pool.fetchval(Q["db_now"])
        fence = self._fence(pod_name, keeper, requested_at)
        try:
            # a stop issued before this wake is let land first: the wake then sees the stopped pod and starts it
            # (a stop issued since halts it, as it halts any billable call below)
            halted = await self._stops(pod_name, requested_at)
            result, completion = await wake(attempt, _closed(halted) if halted is not None else fence)
        except asyncio.CancelledError:
            # shutdown past its grace: the outcome is still recorded (#2541), then the cancellation goes on
            await self._complete(pod_name, attempt, {
                "outcome": "Failed", "wake_outcome": "Exception",
                "reason": "interrupted by shutdown before the wake completed; check the pod's billable actions",
            }, None)
            raise
        await self._complete(pod_name, attempt, completion, result)
        return result

    async def _insert_wake(self, attempt: uuid.UUID, pod_name: str, holder: str) -> datetime:
        async with self.store.pool.acquire() as conn, conn.transaction():
            await conn.execute(Q["pod_order_lock"], pod_name)
            requested_at: datetime = await conn.fetchval(Q["insert_wake"], attempt, pod_name, holder)
            return requested_at

    async def _complete(self, pod_name: str, attempt: uuid.UUID, completion: Payload, result: Payload | None) -> None:
        try:
            status = await asyncio.wait_for(self.store.pool.execute(
                Q["complete_wake"], attempt, completion["outcome"], completion["wake_outcome"],
                completion["reason"], completion.get("pod_id"), completion.get("gpu_id"),
                completion.get("price_per_hour"), completion.get("candidates_considered"),
                completion.get("last_provider_status"), json.dumps(result) if result is not None else None,
            ), self.record_timeout)
            problem = None if status != "UPDATE 0" else "no open Requested row"
        except Exception as error:
            problem = type(error).__name__
        if problem is not None:
            # A write the store refused leaves the whole entry in the log at ERROR, a level nothing filters
            # (#2541: the cause of four failed wakes had rotated out of the logs).
            log.error("pod %s: wake %s completed, history NOT persisted (%s): %s", pod_name, attempt, problem,
                      json.dumps({"attempt_id": str(attempt), "pod_name": pod_name, **completion}, default=str))

    async def _join(self, key: str, pod_name: str, arrival: datetime) -> Payload | None:
        """Wait for the wake another replica runs; None when there is none to join (try to lead)."""
        pool = self.store.pool
        row = await pool.fetchrow(Q["in_flight_wake"], pod_name)
        if row is None:
            done = await self._completed_since(pod_name, arrival)
            if done is not None:
                return done
            await asyncio.sleep(self.poll_seconds)
            return None
        log.info("pod %s: joining wake %s run by %s", pod_name, row["attempt_id"], row["holder"])
        next_lease_check = time.monotonic() + self.lease_seconds / 3
        while True:
            result = await pool.fetchrow(Q["wake_result"], row["attempt_id"])
            if result is not None and result["completed_at"] is not None:
                return dict(json.loads(result["result"])) if result["result"] else None
            if time.monotonic() >= next_lease_check:
                next_lease_check = time.monotonic() + self.lease_seconds / 3
                if await self.store.leases.holder(f"wake:{key}") is None:
                    return None  # its runner is gone: lead a new wake (it closes the abandoned row)
            await asyncio.sleep(self.poll_seconds)


def _closed(halt: Halt) -> Fence:
    async def fence() -> Halt | None:
        return halt

    return fence
