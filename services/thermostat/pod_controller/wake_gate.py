"""One wake per pod at a time — within a replica and across replicas — and every caller gets its result.

Two overlapping wakes (a retry after Cloudflare's 524, a double tap, two replicas behind a load balancer)
would both read "no pod" and both POST /v2/pods. So:

- In a replica, a wake runs as a task detached from the request that asked for it: a caller that
  disconnects never aborts a half-done start or create, and a caller arriving meanwhile awaits the same task
  (the seed's singleton gate; the joiner touches RunPod not at all).
- Across replicas, the task first takes the pod's wake lease (`wake:<pod>`, expiry by the database clock)
  and writes the Requested row before RunPod is touched. A replica that cannot take the lease joins the
  in-flight row: it waits for its completion and returns the result stored with it. A row whose holder's
  lease lapsed (the replica died mid-wake) is closed as abandoned and the next caller runs a new wake.

Without the store there is no cross-replica gate, and a wake without it could bill twice: the gate then
refuses (fail closed) instead of running unguarded.
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

from thermostat.store.db import Store
from thermostat.store.keeper import LeaseKeeper

from .records import Q

log = logging.getLogger("thermostat.pod_controller.wake_gate")

Payload = dict[str, Any]
RunWake = Callable[[uuid.UUID, Callable[[], bool]], Awaitable[tuple[Payload, Payload]]]
"""Runs one wake for an attempt id, asking the second argument (is the lease still ours?) before every
billable call; returns (the caller-facing result, the history row's completion fields)."""


class WakeGateUnavailable(Exception):
    """The store could not be reached, so no wake may run."""


class WakeGate:
    def __init__(self, store: Store, *, replica: str, lease_seconds: float = 15.0, poll_seconds: float = 0.1,
                 record_timeout: float = 10.0) -> None:
        self.store = store
        self.replica = replica
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self.record_timeout = record_timeout
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
        """Let running wakes finish (on shutdown) so none is left half-done."""
        pending = [t for t in self._tasks.values() if not t.done()]
        if pending:
            log.info("waiting up to %.0fs for %d wake(s) in flight", seconds, len(pending))
            await asyncio.wait(pending, timeout=seconds)

    async def _run_or_join(self, key: str, pod_name: str, wake: RunWake) -> Payload:
        pool = self.store.pool
        try:
            arrival: datetime = await pool.fetchval(Q["db_now"])
        except Exception as error:
            raise WakeGateUnavailable(f"store unreachable ({type(error).__name__}); nothing was started") from error
        while True:
            keeper = LeaseKeeper(self.store.leases, name=f"wake:{key}", holder=f"{self.replica}:{uuid.uuid4()}",
                                 ttl=self.lease_seconds)
            try:
                lease = await keeper.acquire()
            except Exception as error:
                raise WakeGateUnavailable(f"wake lease unavailable ({type(error).__name__}); nothing was started") \
                    from error
            if lease is not None:
                try:
                    return await self._lead(pod_name, keeper, wake)
                finally:
                    with contextlib.suppress(Exception):
                        await keeper.release()
            joined = await self._join(key, pod_name, arrival)
            if joined is not None:
                return joined

    async def _lead(self, pod_name: str, keeper: LeaseKeeper, wake: RunWake) -> Payload:
        holder = keeper.holder
        pool = self.store.pool
        attempt = uuid.uuid4()
        try:
            abandoned = await pool.fetch(Q["abandon_wakes"], pod_name)
            for row in abandoned:
                log.warning("pod %s: wake %s abandoned by a replica that stopped; starting anew", pod_name,
                            row["attempt_id"])
            await asyncio.wait_for(pool.execute(Q["insert_wake"], attempt, pod_name, holder), self.record_timeout)
        except Exception as error:
            # we hold the lease, so the wake is still gated; only its history entry is missing
            log.warning("pod %s: wake %s requested, history not written (%s)", pod_name, attempt,
                        type(error).__name__)
        result, completion = await wake(attempt, keeper.is_trusted)
        try:
            status = await asyncio.shield(asyncio.wait_for(pool.execute(
                Q["complete_wake"], attempt, completion["outcome"], completion["wake_outcome"],
                completion["reason"], completion.get("pod_id"), completion.get("gpu_id"),
                completion.get("price_per_hour"), completion.get("candidates_considered"),
                completion.get("last_provider_status"), json.dumps(result),
            ), self.record_timeout))
            problem = None if status != "UPDATE 0" else "no Requested row"  # its insert failed above
        except Exception as error:
            problem = type(error).__name__
        if problem is not None:
            # A write the store refused leaves the whole entry in the log at ERROR, a level nothing filters
            # (#2541: the cause of four failed wakes had rotated out of the logs).
            log.error("pod %s: wake %s completed, history NOT persisted (%s): %s", pod_name, attempt, problem,
                      json.dumps({"attempt_id": str(attempt), "pod_name": pod_name, **completion}, default=str))
        return result

    async def _join(self, key: str, pod_name: str, arrival: datetime) -> Payload | None:
        """Wait for the wake another replica runs; None when there is none to join (try to lead)."""
        pool = self.store.pool
        row = await pool.fetchrow(Q["in_flight_wake"], pod_name)
        if row is None:
            done = await pool.fetchrow(Q["wake_completed_since"], pod_name, arrival)
            if done is not None and done["result"] is not None:
                return dict(json.loads(done["result"]))
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
